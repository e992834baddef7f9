package device

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// slowBMC reads on for its first onReads status reads after PowerOff,
// then off; one read in between fails.
type slowBMC struct {
	mu      sync.Mutex
	off     bool
	reads   int
	onReads int
}

func (b *slowBMC) PowerState(context.Context) (vocab.PowerState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.off {
		return vocab.PowerOn, nil
	}
	b.reads++
	switch {
	case b.reads == 2:
		return vocab.PowerUnknown, errors.New("busy")
	case b.reads <= b.onReads:
		return vocab.PowerOn, nil
	}
	return vocab.PowerOff, nil
}
func (b *slowBMC) PowerOff(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.off = true
	return nil
}
func (b *slowBMC) PowerOn(context.Context) error              { return nil }
func (b *slowBMC) PowerCycle(context.Context) error           { return nil }
func (b *slowBMC) SystemGUID(context.Context) (string, error) { return "", nil }
func (b *slowBMC) Close() error                               { return nil }

// TestVerifiedActionReportsWhatItWaitsFor: a person running `fenced bmc
// off` or `confirm --power-off` sees what the device still reads while
// fenced waits, not a silent terminal.
func TestVerifiedActionReportsWhatItWaitsFor(t *testing.T) {
	var out bytes.Buffer
	var calls []VerifyProgress
	printer := ProgressPrinter(&out, "worker-3: BMC", 20*time.Millisecond)
	o := VerifyOptions{PowerWait: 30 * time.Millisecond, Interval: 10 * time.Millisecond, Timeout: 10 * time.Second,
		Progress: func(p VerifyProgress) { calls = append(calls, p); printer(p) }}
	res, err := PowerOffVerified(context.Background(), &slowBMC{onReads: 5}, o)
	if err != nil || res.State != vocab.PowerOff {
		t.Fatalf("PowerOffVerified = %+v, %v", res, err)
	}
	if len(calls) != 5 {
		t.Errorf("Progress called %d times, want once per read that was not off (5)", len(calls))
	}
	for _, c := range calls {
		if c.Want != vocab.PowerOff || c.Timeout != o.Timeout || c.Elapsed <= 0 {
			t.Errorf("progress %+v: want off within %s, elapsed > 0", c, o.Timeout)
		}
	}
	text := out.String()
	if !strings.Contains(text, "worker-3: BMC: still reads on after") || !strings.Contains(text, "waiting up to 10s for off") {
		t.Errorf("printed progress says too little:\n%s", text)
	}
	if n := strings.Count(text, "\n"); n == 0 || n > len(calls) {
		t.Errorf("printed %d lines for %d reads: want at least one, throttled", n, len(calls))
	}
}
