// Package poll is how the tests wait: for a condition, polled, with a
// deadline generous enough for a busy machine — never a sleep standing in
// for the thing awaited.
package poll

import (
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
