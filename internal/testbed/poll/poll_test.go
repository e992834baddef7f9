package poll

import (
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
