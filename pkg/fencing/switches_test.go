package fencing

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// switchBed is a real API server with one victim Node whose BMC reads off
// and whose agent is dead in gossip, and a fencer watching it.
type switchBed struct {
	t      *testing.T
	ctx    context.Context
	client kubernetes.Interface
	node   string
	bmc    *countingBMC
	member *switchMember
	f      *Fencer
}

// switchMember is one gossip member, alive until the power loss.
type switchMember struct {
	mu sync.Mutex
	m  heartbeat.Member
}

func (s *switchMember) Member(name string) (heartbeat.Member, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m, name == s.m.Name
}
func (s *switchMember) Alive() int { return 2 }
func (s *switchMember) Challenge(ctx context.Context, name, addr string) (heartbeat.Proof, error) {
	<-ctx.Done()
	return heartbeat.Proof{}, heartbeat.ErrNoProof
}

// newSwitchBed creates node (Ready, with labels) and starts a fencer under
// policy p, its Config changed by mods; the node loses power when the test
// calls powerLoss.
func newSwitchBed(ctx context.Context, t *testing.T, c *cluster.Cluster, node string, p core.Policy, labels map[string]string, mods ...func(*Config)) *switchBed {
	t.Helper()
	client := c.Client()
	now := metav1.Now()
	n, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node, Labels: labels},
		Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{BootID: "boot-1"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: now, LastTransitionTime: now}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	rec, stop := taint.NewRecorder(client, "fenced-test")
	t.Cleanup(stop)
	b := &switchBed{t: t, ctx: ctx, client: client, node: node, bmc: newCountingBMC(vocab.PowerOff),
		member: &switchMember{m: heartbeat.Member{Name: node, State: vocab.MemberAlive, Since: time.Now()}}}
	cfg := Config{
		Identity: "fencer", Client: client,
		Inventory: inventoryOf(map[string]device.BMC{node: b.bmc}, map[string]string{node: "test://" + node}),
		Members:   b.member,
		Tainter:   taint.NewTainter(client, "fencer", rec), Recorder: rec,
		Policy: p, LeaseNamespace: hostileNS, Metrics: NewMetrics(prometheus.NewRegistry()), Logger: testLog(t, "fencer"),
	}
	for _, m := range mods {
		m(&cfg)
	}
	b.f = startFencerWatching(t, cfg, client)
	// The fencer has seen the node Ready (so it is not joining).
	b.waitFor(30*time.Second, "the fencer to see the node", func() bool {
		b.f.mu.Lock()
		defer b.f.mu.Unlock()
		s := b.f.state[node]
		return s != nil && s.seenReady
	})
	return b
}

// powerLoss makes the node's gossip member dead and the Node NotReady, as
// the node lifecycle controller does.
func (b *switchBed) powerLoss() {
	b.t.Helper()
	b.member.mu.Lock()
	b.member.m.State, b.member.m.Since = vocab.MemberDead, time.Now()
	b.member.mu.Unlock()
	b.f.Notify(b.node)
	n, err := b.client.CoreV1().Nodes().Get(b.ctx, b.node, metav1.GetOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := b.client.CoreV1().Nodes().UpdateStatus(b.ctx, n, metav1.UpdateOptions{}); err != nil {
		b.t.Fatal(err)
	}
}

func (b *switchBed) waitFor(timeout time.Duration, what string, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			b.t.Fatalf("no %s within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *switchBed) tainted() bool {
	n, err := b.client.CoreV1().Nodes().Get(b.ctx, b.node, metav1.GetOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	return taint.HasTaint(n)
}

// events returns the Events about the node with reason.
func (b *switchBed) events(reason string) []corev1.Event {
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": b.node, "reason": reason}.AsSelector().String()
	list, err := b.client.CoreV1().Events(metav1.NamespaceDefault).List(b.ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		b.t.Fatal(err)
	}
	return list.Items
}

// waitEvent waits for one Event with reason and returns its message.
func (b *switchBed) waitEvent(reason string) string {
	b.t.Helper()
	var msg string
	b.waitFor(30*time.Second, "Event "+reason, func() bool {
		ev := b.events(reason)
		if len(ev) > 0 {
			msg = ev[0].Message
		}
		return len(ev) > 0
	})
	return msg
}

// stillUntainted checks for a while that no taint appears, and that the
// Event with reason was sent once.
func (b *switchBed) stillUntainted(d time.Duration, reason string) {
	b.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if b.tainted() {
			b.t.Fatal("tainted while held")
		}
	}
	if ev := b.events(reason); len(ev) != 1 || ev[0].Count != 1 {
		b.t.Fatalf("Events %s: %+v, want one, once", reason, ev)
	}
}

func setPause(ctx context.Context, t *testing.T, client kubernetes.Interface, paused string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: taint.PauseConfigMap, Namespace: hostileNS},
		Data: map[string]string{taint.PauseKey: paused, taint.PauseReasonKey: "storage maintenance"}}
	cms := client.CoreV1().ConfigMaps(hostileNS)
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err == nil {
		return
	}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSwitchesAgainstAPIServer runs each switch through a power loss
// against a real API server: what is held is reported once (an Event on
// the Node, a metric), no taint is written, and lifting the switch (the
// pause ConfigMap edited, the label removed) fences at once, without a
// restart.
func TestSwitchesAgainstAPIServer(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{})
	if _, err := c.CreateNamespace(ctx, hostileNS); err != nil {
		t.Fatal(err)
	}

	t.Run("dry-run", func(t *testing.T) {
		p := testPolicy(vocab.ModeConfirmOnly)
		p.DryRun = true
		b := newSwitchBed(ctx, t, c, "dry-victim", p, nil)
		if v := testutil.ToFloat64(b.f.cfg.Metrics.DryRun); v != 1 {
			t.Errorf("fenced_dry_run = %v", v)
		}
		b.powerLoss()
		msg := b.waitEvent("DryRunWouldTaint")
		if !strings.HasPrefix(msg, "dry-run: would taint dry-victim out-of-service with bmc-power-off evidence: BMC test://dry-victim read power off") {
			t.Errorf("message %q", msg)
		}
		b.stillUntainted(3*time.Second, "DryRunWouldTaint")
		if v := testutil.ToFloat64(b.f.cfg.Metrics.DryRunActions.WithLabelValues("Taint")); v != 1 {
			t.Errorf("fenced_dry_run_actions_total{action=Taint} = %v, want 1", v)
		}
	})

	t.Run("exclusion", func(t *testing.T) {
		b := newSwitchBed(ctx, t, c, "excluded-victim", testPolicy(vocab.ModeConfirmOnly), map[string]string{taint.Medik8sExcludeLabel: "true"})
		b.powerLoss()
		msg := b.waitEvent("ExcludedWouldReadPower")
		if !strings.Contains(msg, taint.Medik8sExcludeLabel+"=true") {
			t.Errorf("message %q", msg)
		}
		b.stillUntainted(3*time.Second, "ExcludedWouldReadPower")
		if n := b.bmc.reads.Load(); n != 0 {
			t.Errorf("the excluded node's BMC was read %d times", n)
		}
		if v := testutil.ToFloat64(b.f.cfg.Metrics.NodesExcluded); v != 1 {
			t.Errorf("fenced_nodes_excluded = %v", v)
		}
		// The label goes: the node is fenced at once.
		n, err := b.client.CoreV1().Nodes().Get(ctx, b.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(n.Labels, taint.Medik8sExcludeLabel)
		if _, err := b.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		b.waitFor(15*time.Second, "taint after the label was removed", b.tainted)
	})

	t.Run("pause", func(t *testing.T) {
		b := newSwitchBed(ctx, t, c, "paused-victim", testPolicy(vocab.ModeConfirmOnly), nil)
		setPause(ctx, t, b.client, "true")
		b.waitFor(15*time.Second, "fenced_paused 1", func() bool { return testutil.ToFloat64(b.f.cfg.Metrics.Paused) == 1 })
		b.powerLoss()
		msg := b.waitEvent("PausedWouldTaint")
		if !strings.HasPrefix(msg, "fencing is paused cluster-wide (storage maintenance): would taint paused-victim") {
			t.Errorf("message %q", msg)
		}
		b.stillUntainted(3*time.Second, "PausedWouldTaint")
		sel := fields.Set{"involvedObject.kind": "ConfigMap", "involvedObject.name": taint.PauseConfigMap, "reason": string(vocab.EventFencingPaused)}.AsSelector().String()
		if l, err := b.client.CoreV1().Events(hostileNS).List(ctx, metav1.ListOptions{FieldSelector: sel}); err != nil || len(l.Items) == 0 {
			t.Errorf("no %s Event on the ConfigMap: %v", vocab.EventFencingPaused, err)
		}
		// Resume: the taint within seconds, no restart.
		resumed := time.Now()
		setPause(ctx, t, b.client, "false")
		b.waitFor(15*time.Second, "taint after resume", b.tainted)
		t.Logf("tainted %s after the resume", time.Since(resumed).Round(time.Millisecond))
		if v := testutil.ToFloat64(b.f.cfg.Metrics.Paused); v != 0 {
			t.Errorf("fenced_paused = %v after resume", v)
		}
	})
}

// TestHoldsEffects: what the stale VolumeAttachment report asks before it
// deletes anything — the same switches that hold the fencer's own effects.
func TestHoldsEffects(t *testing.T) {
	const ns = "fenced-system"
	pausedCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: taint.PauseConfigMap},
		Data: map[string]string{taint.PauseKey: "true", taint.PauseReasonKey: "storage maintenance"}}
	excluded := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-1", Labels: map[string]string{taint.ExcludeLabel: "true"}}}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-2"}}
	for _, tc := range []struct {
		name   string
		dryRun bool
		pause  *corev1.ConfigMap
		node   *corev1.Node
		want   string // "" for not held
	}{
		{"nothing on", false, nil, plain, ""},
		{"deleted node, nothing on", false, nil, nil, ""},
		{"dry-run", true, nil, plain, "policy.dryRun"},
		{"paused", false, pausedCM, plain, "storage maintenance"},
		{"excluded", false, nil, excluded, taint.ExcludeLabel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if tc.pause != nil {
				if err := idx.Add(tc.pause); err != nil {
					t.Fatal(err)
				}
			}
			f := &Fencer{cfg: Config{LeaseNamespace: ns}, pause: corelisters.NewConfigMapLister(idx).ConfigMaps(ns)}
			f.applied.Store(&applied{Settings: Settings{Policy: core.Policy{DryRun: tc.dryRun}}})
			held, why := f.HoldsEffects(tc.node)
			if held != (tc.want != "") || !strings.Contains(why, tc.want) {
				t.Errorf("HoldsEffects = %v, %q; want held=%v mentioning %q", held, why, tc.want != "", tc.want)
			}
		})
	}
}
