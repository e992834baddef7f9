package fencing

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// gatedBMC reads its power only once the test opens its gate, and counts
// the reads that started and the ones whose context ended before the gate
// opened (cancelled, not finished).
type gatedBMC struct {
	countingBMC
	gate      chan struct{}
	started   chan struct{} // one send per read that reached the gate
	cancelled atomic.Int32
}

func newGatedBMC(p vocab.PowerState) *gatedBMC {
	b := &gatedBMC{gate: make(chan struct{}), started: make(chan struct{}, 100)}
	b.power.Store(p)
	return b
}

func (b *gatedBMC) PowerState(ctx context.Context) (vocab.PowerState, error) {
	b.started <- struct{}{}
	select {
	case <-b.gate:
	case <-ctx.Done():
		b.cancelled.Add(1)
		return vocab.PowerUnknown, ctx.Err()
	}
	return b.countingBMC.PowerState(ctx)
}

// TestReconfigureDuringARead: a power read of the suspect node is in
// flight when a reload comes. It finishes on the driver it started with
// (never cancelled); its answer is evidence only while the reload left the
// node's devices as they were. When the reload moved the node's BMC, the
// answer from the old address is not used: the node is read at the new one
// and the taint's evidence names it.
func TestReconfigureDuringARead(t *testing.T) {
	tests := []struct {
		name string
		// moved: the reload gives the victim another BMC; else it changes
		// only the policy (dry-run stays off) and another node.
		moved        bool
		wantEndpoint string
	}{
		{"the node's BMC moved: read again at the new address", true, "test://victim-new"},
		{"the node's BMC unchanged: the read in flight is the evidence", false, "test://victim"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := newGatedBMC(vocab.PowerOff)
			f, client := runFencer(t, old)
			select {
			case <-old.started:
			case <-time.After(20 * time.Second):
				t.Fatal("the suspect node's BMC was never read")
			}

			next := map[string]device.BMC{"victim": old, "other": newCountingBMC(vocab.PowerOn)}
			endpoints := map[string]string{"victim": "test://victim", "other": "test://other"}
			moved := newCountingBMC(vocab.PowerOff)
			if tt.moved {
				next["victim"], endpoints["victim"] = moved, "test://victim-new"
			}
			p := testPolicy(vocab.ModeConfirmOnly)
			p.ShutdownWait = time.Minute
			drained := f.Reconfigure(Settings{Inventory: inventoryOf(next, endpoints), Policy: p})
			select {
			case <-drained:
				t.Fatal("the replaced settings were drained while a read on them still ran")
			case <-time.After(50 * time.Millisecond):
			}
			close(old.gate)
			select {
			case <-drained:
			case <-time.After(10 * time.Second):
				t.Fatal("the replaced settings were not drained once the read on them ended")
			}
			if n := old.cancelled.Load(); n != 0 {
				t.Errorf("the read in flight was cancelled by the reload (%d)", n)
			}
			ev := waitTaintEvidence(t, client, "no taint after the reload")
			if ev.BMC == nil || ev.BMC.Endpoint != tt.wantEndpoint {
				t.Fatalf("evidence %+v; want a reading of %s", ev.BMC, tt.wantEndpoint)
			}
			if tt.moved && moved.reads.Load() == 0 {
				t.Error("the new BMC was never read")
			}
		})
	}
}

// TestReconfigureRemovesANode: a suspect node whose BMC reads on is read
// again and again (confirm-only); a reload that drops it from the
// inventory stops the reads — no read, no taint, no power action from the
// reload — and the core waits for a device ("no BMC in the inventory").
func TestReconfigureRemovesANode(t *testing.T) {
	on := newCountingBMC(vocab.PowerOn)
	p := testPolicy(vocab.ModeConfirmOnly)
	p.RecheckPoweredOn = 100 * time.Millisecond
	f, client := runFencerWith(t, p, on)
	poll.Until(t, 20*time.Second, "the suspect node read twice", func() bool { return on.reads.Load() >= 2 })

	<-f.Reconfigure(Settings{Inventory: inventoryOf(nil, nil), Policy: p})
	after := on.reads.Load()
	time.Sleep(time.Second) // ten rechecks' worth
	if n := on.reads.Load(); n != after {
		t.Errorf("the removed node was read %d more times after the reload", n-after)
	}
	if on.powerOffs.Load() != 0 {
		t.Error("a power action after the reload")
	}
	n, err := client.CoreV1().Nodes().Get(context.Background(), "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if taint.HasTaint(n) {
		t.Error("the removed node was tainted")
	}
	if f.InventoryNodes() != 0 {
		t.Errorf("InventoryNodes = %d after the node's removal", f.InventoryNodes())
	}
}

// TestReconfigureDryRun: the policy is taken whole at the next decision:
// a reload that sets dry-run holds the taint the old policy would have
// written, and says so in fenced_dry_run.
func TestReconfigureDryRun(t *testing.T) {
	gated := newGatedBMC(vocab.PowerOff)
	f, client := runFencer(t, gated)
	<-gated.started
	p := testPolicy(vocab.ModeConfirmOnly)
	p.DryRun = true
	f.Reconfigure(Settings{Inventory: inventoryOf(map[string]device.BMC{"victim": gated}, map[string]string{"victim": "test://victim"}), Policy: p})
	if held, why := f.HoldsEffects(nil); !held {
		t.Fatalf("HoldsEffects after a reload to dry-run: false (%s)", why)
	}
	close(gated.gate)
	poll.Until(t, 10*time.Second, "the held taint counted", func() bool {
		return testutil.ToFloat64(f.cfg.Metrics.DryRunActions.WithLabelValues("Taint")) == 1
	})
	n, err := client.CoreV1().Nodes().Get(context.Background(), "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if taint.HasTaint(n) {
		t.Error("tainted in dry-run")
	}
	if v := testutil.ToFloat64(f.cfg.Metrics.DryRun); v != 1 {
		t.Errorf("fenced_dry_run = %v after the reload", v)
	}
}
