// Package poll is how the tests wait: for a condition, polled, with a
// deadline generous enough for a busy machine — never a sleep standing in
// for the thing awaited.
//
// The deadline bounds the waiting, never one look: the condition is always
// checked at least once, and once more after the deadline has passed, and a
// look that takes longer than the whole deadline (an API request on a
// loaded machine) still counts. A wait of a millisecond is thus a check of
// the present, not a race against the machine's speed.
package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Interval is how often Until checks its condition: short beside every
// deadline the tests use, long enough not to busy a shared machine.
const Interval = 20 * time.Millisecond

// Until checks cond every Interval until it holds, and fails the test,
// saying what it waited for, when it does not hold within timeout.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(Interval)
	}
}

// UntilContext is Until for code that reports errors instead of failing a
// test (the test bed's harness, which commands use too): it checks cond
// every interval — longer than Interval where each look is a request to an
// API server — until it holds, and returns an error once it has not held
// for timeout, or ctx's error once ctx ends. Each look gets ctx, not a
// context ending at the deadline.
func UntilContext(ctx context.Context, interval, timeout time.Duration, cond func(context.Context) bool) error {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for !cond(ctx) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s", ErrTimeout, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
	return nil
}

// ErrTimeout is wrapped by UntilContext's error when the condition did not
// hold in time.
var ErrTimeout = errors.New("condition not met")
