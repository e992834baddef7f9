package fencing

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
)

// renewingBMC reads off, and runs during each read what its test sets: a
// kubelet renewing its Lease while the device says its node is off.
type renewingBMC struct {
	*countingBMC
	during atomic.Pointer[func(context.Context)]
}

func (b *renewingBMC) PowerState(ctx context.Context) (vocab.PowerState, error) {
	if f := b.during.Load(); f != nil {
		(*f)(ctx)
	}
	return b.countingBMC.PowerState(ctx)
}

// TestKubeletLeaseWatchedWhileOfInterest runs a fencer on a real API
// server: it watches no kubelet Lease while its node is healthy; once the
// node is suspected it watches that one Lease, whose list brings the
// renewal from before the watch; a renewal during the power reading — the
// node alive while its device reads off, as behind a mislabelled plug — is
// seen: the alarm, no taint. Back to healthy, the watch is closed.
func TestKubeletLeaseWatchedWhileOfInterest(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{})
	if _, err := c.CreateNamespace(ctx, hostileNS); err != nil {
		t.Fatal(err)
	}
	client := c.Client()
	const node = "leased-victim"
	// Stored with microseconds, as the API server keeps a MicroTime.
	before := time.Now().Add(-3 * time.Second).Truncate(time.Microsecond)
	if _, err := client.CoordinationV1().Leases(KubeletLeaseNamespace).Create(ctx, kubeletLease(node, before), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bmc := &renewingBMC{countingBMC: newCountingBMC(vocab.PowerOff)}
	b := newSwitchBed(ctx, t, c, node, testPolicy(vocab.ModeConfirmOnly), nil, func(cfg *Config) {
		cfg.Inventory = inventoryOf(map[string]device.BMC{node: bmc}, map[string]string{node: "test://" + node})
	})
	watches := func() float64 { return testutil.ToFloat64(b.f.cfg.Metrics.KubeletLeaseWatches) }
	if w := watches(); w != 0 {
		t.Fatalf("%v kubelet Lease watches while the node is healthy, want 0", w)
	}
	if r := b.f.kubeletRenew(node); !r.IsZero() {
		t.Fatalf("the healthy node's renewal is known (%s): its Lease is watched", r)
	}

	renew := func(ctx context.Context) {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"renewTime": metav1.NewMicroTime(time.Now())}})
		if _, err := client.CoordinationV1().Leases(KubeletLeaseNamespace).Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("renewing the kubelet's Lease: %v", err)
		}
	}
	bmc.during.Store(&renew)
	b.powerLoss()
	b.waitFor(30*time.Second, "a watch of the suspect's kubelet Lease", func() bool { return watches() == 1 })
	b.waitFor(30*time.Second, "the renewal from before the watch, from its list", func() bool { return !b.f.kubeletRenew(node).Before(before) })
	msg := b.waitEvent(string(vocab.EventPowerReadingContradicted))
	t.Logf("alarm: %s", msg)
	if b.tainted() {
		t.Fatal("tainted although the kubelet renewed its Lease during the reading")
	}

	// The node answers again: healthy, and its Lease no longer watched.
	bmc.during.Store(nil)
	b.member.mu.Lock()
	b.member.m.State, b.member.m.Since = vocab.MemberAlive, time.Now()
	b.member.mu.Unlock()
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.f.Notify(node)
	b.waitFor(30*time.Second, "the node healthy and its Lease's watch closed", func() bool {
		b.f.mu.Lock()
		phase := b.f.phaseOf(node)
		b.f.mu.Unlock()
		return phase == core.PhaseHealthy && watches() == 0
	})
	if r := b.f.kubeletRenew(node); !r.IsZero() {
		t.Errorf("renewal still known (%s) after the watch closed", r)
	}
}

// TestLeaseInterest: which nodes' kubelet Leases a fencer watches.
func TestLeaseInterest(t *testing.T) {
	alive := core.MemberObs{Known: true, State: vocab.MemberAlive}
	tests := []struct {
		name  string
		phase core.Phase
		m     core.MemberObs
		want  bool
	}{
		{"healthy, agent alive", core.PhaseHealthy, alive, false},
		{"healthy, no agent", core.PhaseHealthy, core.MemberObs{}, false},
		{"healthy, agent left (a restart is waited for while the kubelet renews)", core.PhaseHealthy, core.MemberObs{Known: true, State: vocab.MemberLeft}, true},
		{"healthy, agent dead in gossip", core.PhaseHealthy, core.MemberObs{Known: true, State: vocab.MemberDead}, true},
		{"suspect", core.PhaseSuspect, alive, true},
		{"confirming", core.PhaseConfirming, alive, true},
		{"fenced", core.PhaseFenced, alive, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := leaseInterest(tt.phase, tt.m); got != tt.want {
				t.Errorf("leaseInterest(%s, %+v) = %v, want %v", tt.phase, tt.m, got, tt.want)
			}
		})
	}
}
