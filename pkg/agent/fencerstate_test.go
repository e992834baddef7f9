package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/vocab"
)

// stateNS is where the writer tests keep node-fencer's key Lease.
const stateNS = "fenced-system"

// withKeyLease is a fake API server holding node-fencer's key Lease, as
// the agent publishes it before its fencer state is written.
func withKeyLease(t *testing.T) *fake.Clientset {
	t.Helper()
	client := fake.NewClientset()
	k, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := publish.Publish(context.Background(), client, stateNS, "node-fencer", "boot-1", k.Public(), time.Now()); err != nil {
		t.Fatal(err)
	}
	return client
}

// TestFencerStatePublished: a fencer's state — the configuration in
// force as the reloader has it — is on its key Lease once the writer
// runs, is renewed, and changes at once with an applied reload (dry-run
// on, another file hash), not only at the next renewal; a refused file
// changes nothing.
func TestFencerStatePublished(t *testing.T) {
	b := newReloadBed(t)
	client := withKeyLease(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := newFencerStateWriter(client, stateNS, "node-fencer", func() publish.FencerState {
		cfg, hash := b.r.InForce()
		return publish.FencerState{Ready: true, Mode: cfg.Policy.Mode, DryRun: cfg.Policy.DryRun, InventoryNodes: len(cfg.BMCs), ConfigHash: hash}
	}, slog.New(slog.DiscardHandler))
	// Renewals far apart: a change must not wait for one.
	w.renewEvery = time.Hour
	b.r.onApply = w.changed
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	published := func(t *testing.T, want func(publish.FencerState) bool) publish.FencerState {
		t.Helper()
		var got publish.FencerState
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			l, err := client.CoordinationV1().Leases(stateNS).Get(ctx, publish.LeaseName("node-fencer"), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			var ok bool
			_, got, _, ok = publish.FencerStateOf(l)
			return ok && want(got), nil
		}); err != nil {
			t.Fatalf("the Lease's fencer state %+v: %v", got, err)
		}
		return got
	}
	first := published(t, func(s publish.FencerState) bool { return s.ConfigHash != "" })
	if first.DryRun || first.Mode != vocab.ModeConfirmOnly || first.InventoryNodes != 2 || !first.Ready {
		t.Errorf("at start: %+v, want ready, confirm-only, not dry-run, 2 nodes", first)
	}

	for _, step := range []struct {
		name   string
		text   string
		change bool
	}{
		{"refused", "apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\nbmc: {nodes: [{name: node-a}]}\n", false},
		{"dry-run and power-off", b.configText(8946, "10.0.0.1", "policy: {dryRun: true, mode: power-off}\n"), true},
	} {
		b.write(t, step.text)
		b.r.check()
		b.r.check()
		if !step.change {
			// Nothing applied, nothing kicked: the Lease keeps the start's.
			time.Sleep(50 * time.Millisecond)
			if got := published(t, func(publish.FencerState) bool { return true }); got != first {
				t.Errorf("%s: the state changed to %+v", step.name, got)
			}
			continue
		}
		got := published(t, func(s publish.FencerState) bool { return s.DryRun })
		if got.Mode != vocab.ModePowerOff || got.ConfigHash == first.ConfigHash || got.ConfigHash == "" {
			t.Errorf("%s: %+v, want power-off and a new hash (was %s)", step.name, got, first.ConfigHash)
		}
	}
}

// TestFencerStateRenewed: the writer renews the Lease while nothing
// changes, so that a fencer that stopped is told by its renew time.
func TestFencerStateRenewed(t *testing.T) {
	client := withKeyLease(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := newFencerStateWriter(client, stateNS, "node-fencer", func() publish.FencerState { return publish.FencerState{Ready: true} },
		slog.New(slog.DiscardHandler))
	w.renewEvery = 20 * time.Millisecond
	clock := time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	ticks := make(chan time.Time, 100)
	w.now = func() time.Time { clock = clock.Add(time.Minute); ticks <- clock; return clock }
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx) }()
	var last time.Time
	for range 3 {
		select {
		case last = <-ticks:
		case <-time.After(10 * time.Second):
			t.Fatal("the writer does not renew")
		}
	}
	cancel()
	<-done
	l, err := client.CoordinationV1().Leases(stateNS).Get(context.Background(), publish.LeaseName("node-fencer"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, renewed, ok := publish.FencerStateOf(l); !ok || renewed.Before(last.Add(-time.Minute)) {
		t.Errorf("renewed %v (state %v), want about %v", renewed, ok, last)
	}
}
