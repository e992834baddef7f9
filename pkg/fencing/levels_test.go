package fencing

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
)

// levelBMC is one plug's driver for readLevels: it answers power after
// delay, or fails at once (fail), or — dark — gives no answer until its
// request is cancelled, which it records.
type levelBMC struct {
	countingBMC
	delay     time.Duration
	fail      bool
	dark      bool
	cancelled atomic.Bool
}

func (b *levelBMC) PowerState(ctx context.Context) (vocab.PowerState, error) {
	switch {
	case b.dark:
		<-ctx.Done()
		b.cancelled.Store(true)
		return "", &device.Error{Kind: vocab.KindTimeout, Err: fmt.Errorf("no answer")}
	case b.fail:
		b.reads.Add(1)
		return "", &device.Error{Kind: vocab.KindAuth, Err: fmt.Errorf("refused")}
	}
	select {
	case <-time.After(b.delay):
	case <-ctx.Done():
		b.cancelled.Store(true)
		return "", &device.Error{Kind: vocab.KindTimeout, Err: ctx.Err()}
	}
	return b.countingBMC.PowerState(ctx)
}

// TestReadLevelsDoesNotWaitForADarkLevel: a level that does not answer
// within NextLevelAfter has the next one read beside it, and the first to
// decide ends the read (the slow one is cancelled); a level that answers,
// or fails, at once is read as before — the next level only after a
// failure, never after an answer.
func TestReadLevelsDoesNotWaitForADarkLevel(t *testing.T) {
	tests := []struct {
		name      string
		bmc, pdu  *levelBMC
		wantPower vocab.PowerState
		wantLevel int
		pduRead   bool
		bmcCancel bool
		atLeast   time.Duration // the read took at least this
	}{
		{name: "BMC answers: the PDU is never read",
			bmc: &levelBMC{delay: 10 * time.Millisecond}, pdu: &levelBMC{},
			wantPower: vocab.PowerOff, wantLevel: 0},
		{name: "BMC fails at once: the PDU at once",
			bmc: &levelBMC{fail: true}, pdu: &levelBMC{},
			wantPower: vocab.PowerOff, wantLevel: 2, pduRead: true},
		{name: "BMC dark: the PDU after NextLevelAfter, the BMC's request cancelled",
			bmc: &levelBMC{dark: true}, pdu: &levelBMC{},
			wantPower: vocab.PowerOff, wantLevel: 2, pduRead: true, bmcCancel: true, atLeast: NextLevelAfter},
		{name: "BMC slow but first: its reading, the PDU's read cancelled",
			bmc: &levelBMC{delay: NextLevelAfter + 200*time.Millisecond}, pdu: &levelBMC{delay: 10 * time.Second},
			wantPower: vocab.PowerOff, wantLevel: 0, atLeast: NextLevelAfter},
		{name: "BMC dark, PDU reads on: on",
			bmc: &levelBMC{dark: true}, pdu: &levelBMC{},
			wantPower: vocab.PowerOn, wantLevel: 2, pduRead: true, bmcCancel: true, atLeast: NextLevelAfter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.bmc.power.Store(vocab.PowerOff)
			tc.pdu.power.Store(tc.wantPower)
			f := &Fencer{cfg: Config{Now: time.Now, Metrics: NewMetrics(prometheus.NewRegistry())}, log: slog.New(slog.DiscardHandler)}
			levels := [][]device.Plug{
				{device.BMCPlug("node-a", tc.bmc, "ipmi://bmc-a")},
				{{Device: "pdu-a", Plug: "3", Driver: tc.pdu, Endpoint: "agent://pdu-a", Key: "pdu-a"}},
			}
			start := time.Now()
			r, fail := f.readLevels(context.Background(), "node-a", levels)
			took := time.Since(start)
			if fail != nil || r == nil {
				t.Fatalf("reading %+v, failure %+v", r, fail)
			}
			if r.Power != tc.wantPower || r.Level != tc.wantLevel {
				t.Errorf("power %s level %d, want %s level %d", r.Power, r.Level, tc.wantPower, tc.wantLevel)
			}
			if got := tc.pdu.reads.Load() > 0; got != tc.pduRead {
				t.Errorf("PDU read: %v, want %v", got, tc.pduRead)
			}
			if tc.bmcCancel {
				// The cancelled request ends in the background.
				deadline := time.Now().Add(time.Minute)
				for !tc.bmc.cancelled.Load() && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if !tc.bmc.cancelled.Load() {
					t.Error("the dark BMC's request was never cancelled")
				}
			}
			if took < tc.atLeast {
				t.Errorf("took %s, less than %s", took, tc.atLeast)
			}
			t.Logf("read in %s: %s", took.Round(time.Millisecond), r.Endpoint)
		})
	}
}
