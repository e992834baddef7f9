package poll

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	Until(t, time.Minute, "the third check", func() bool { return calls.Add(1) >= 3 })
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// failRecorder records a Fatalf instead of ending the test.
type failRecorder struct {
	testing.TB
	failed string
}

func (r *failRecorder) Helper() {}
func (r *failRecorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

func TestUntilFailsAfterTheDeadline(t *testing.T) {
	r := &failRecorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("recovered %v, want the recorder's Fatalf", p)
			}
		}()
		Until(r, 3*Interval, "never", func() bool { return false })
	}()
	if r.failed == "" {
		t.Fatal("Until returned without failing for a condition that never holds")
	}
}

func TestUntilContext(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		timeout time.Duration
		// cond is called with the look's number (from 1) and its context.
		cond      func(n int32, ctx context.Context) bool
		wantErr   error
		wantLooks int32
	}{
		{"holds at the third look", context.Background(), time.Minute,
			func(n int32, _ context.Context) bool { return n >= 3 }, nil, 3},
		// A look slower than the whole deadline still counts: a short
		// deadline checks the present, it does not race the machine.
		{"a look slower than the deadline", context.Background(), time.Millisecond,
			func(_ int32, _ context.Context) bool { time.Sleep(20 * time.Millisecond); return true }, nil, 1},
		{"each look gets the caller's context, not one ending at the deadline", context.Background(), time.Millisecond,
			func(_ int32, ctx context.Context) bool { _, has := ctx.Deadline(); return !has }, nil, 1},
		{"never holds", context.Background(), 50 * time.Millisecond,
			func(int32, context.Context) bool { return false }, ErrTimeout, -1},
		{"the caller's context ends", cancelled, time.Minute,
			func(int32, context.Context) bool { return false }, context.Canceled, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var looks atomic.Int32
			var last time.Time
			start := time.Now()
			err := UntilContext(tc.ctx, Interval, tc.timeout, func(ctx context.Context) bool {
				last = time.Now()
				return tc.cond(looks.Add(1), ctx)
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if n := looks.Load(); tc.wantLooks >= 0 && n != tc.wantLooks {
				t.Fatalf("%d looks, want %d", n, tc.wantLooks)
			}
			if tc.wantErr == ErrTimeout && last.Sub(start) < tc.timeout {
				t.Fatalf("last look %s after the start, want one after the deadline (%s) too", last.Sub(start), tc.timeout)
			}
		})
	}
}
