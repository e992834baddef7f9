package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/internal/testbed/soak"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// upgradeFrom is the release the rolling upgrade starts from: main before
// the evidence annotation had a format version, so its fencers write
// format 1 without "v" and read the annotation with no notion of a version.
const upgradeFrom = "0f742145689c0ab09982283870d699fa2c8e5c2f"

// TestRollingUpgrade upgrades every agent and fencer of a running cluster
// from upgradeFrom to this tree, one machine at a time as a DaemonSet
// rolling update does (each agent stopped with SIGTERM and started again
// from the new binary; the next one once it is back in the gossip ring),
// and pulls a worker's plug when half the machines are upgraded.
//
// The new fencer is frozen across the power loss (as a fencer in the
// middle of its own restart would be), so that the old fencer is the one
// that fences: the evidence on the Node is the old format, and it must be
// read by the new fencers — when they adopt the fence, and when they
// recover the node after the rest of the rollout, which needs the fenced
// boot ID out of it. (That earlier fencers read the new format is
// TestEvidenceAnnotationHistory's "read by every earlier fenced".)
//
// Throughout: no taint without evidence and no taint on a machine that
// could write (soak.Checker on every Node update), no overlapping power
// Leases, the workload moved without two writers; and after the recovery
// nothing left behind — no taint, no fenced annotation, no power Lease, no
// agent key Lease of an earlier boot — with every agent running the new
// binary.
func TestRollingUpgrade(t *testing.T) {
	harness.Parallel(t)
	if testing.Short() {
		t.Skip(harness.SkipShortMessage)
	}
	tBuild := time.Now()
	oldBin, err := harness.FencedAt(upgradeFrom)
	must(t, err)
	newBin, err := harness.CurrentFenced()
	must(t, err)
	t.Logf("fenced at %s: %s; this tree's: %s (%.1fs)", upgradeFrom[:7], oldBin, newBin, time.Since(tBuild).Seconds())

	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "cp-2", "w-1", "w-2", "w-3", "w-4"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1", "cp-2"}, AgentBinary: oldBin},
	})
	start := time.Now()
	checker := soak.NewChecker(func(node string, ev core.Evidence) (bool, string) {
		m := h.Machine(node)
		if _, on := m.BMC.MachinePID(); !on || m.BootID() != ev.BootID {
			return false, ""
		}
		return true, "the machine runs boot " + ev.BootID
	})
	watchInvariants(t, h, checker)
	for _, m := range h.Machines {
		requireAgentRuns(t, m, oldBin)
	}

	const victim, spare = "w-3", "w-4"
	sts, oldPodUID := startWorkload(ctx, t, h, "upgrade", victim, spare)
	waitWriter(t, h, sts.PV, victim, 3)

	order := []string{"cp-1", "w-1", "w-2", "cp-2", victim, spare}
	var took []string
	upgrade := func(name string) {
		t.Helper()
		d := upgradeAgent(t, h, name, newBin)
		took = append(took, fmt.Sprintf("%s %.1fs", name, d.Seconds()))
	}
	for _, name := range order[:3] {
		upgrade(name)
	}

	// Half upgraded: cp-1, w-1, w-2 run this tree; cp-2, w-3, w-4 the old
	// release. The plug of w-3 is pulled while cp-1 is frozen.
	newFencer, oldFencer, m := h.Machine("cp-1"), h.Machine("cp-2"), h.Machine(victim)
	must(t, newFencer.FreezeAgent())
	t.Cleanup(func() { _ = newFencer.ThawAgent() })
	boot := m.BootID()
	t0 := time.Now()
	must(t, m.PowerLoss())
	n := waitTaint(ctx, t, h, victim, true)
	tTaint := time.Now()
	raw := n.Annotations[taint.AnnotationEvidence]
	ev, ok, err := taint.EvidenceOf(n)
	if !ok || err != nil || ev.Method != vocab.EvidenceBMCPowerOff || ev.BootID != boot || ev.By != oldFencer.Name {
		t.Fatalf("evidence %s: %+v (ok %v, err %v); want bmc-power-off of boot %s by %s", raw, ev, ok, err, boot, oldFencer.Name)
	}
	if strings.Contains(raw, `"v":`) {
		t.Fatalf("the old fencer's evidence has a format version: %s", raw)
	}
	t.Logf("fenced by the old fencer %.1fs after the power loss, evidence as it writes it: %s", secs(tTaint, t0), raw)
	must(t, newFencer.ThawAgent())
	// The new fencer adopts the old fencer's fence: it reads its evidence.
	waitMetric(t, newFencer, `fenced_node_state{node="`+victim+`",state="Fenced"} 1`, time.Minute)
	waitMetric(t, newFencer, "fenced_nodes_evidence_newer_format 0", time.Minute)
	_, _, tRunning := requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
	requireSafe(t, h, sts.PV)

	// The rest of the rollout, the victim still off: its agent is replaced
	// in place and starts from the new binary when it boots.
	for _, name := range order[3:] {
		upgrade(name)
	}
	// The upgraded old fencer reads the fence it wrote before its upgrade.
	waitMetric(t, oldFencer, `fenced_node_state{node="`+victim+`",state="Fenced"} 1`, time.Minute)

	// Power back: only new fencers now, and they recover the node on the
	// old fencer's evidence (the boot it was fenced in).
	tOn := time.Now()
	must(t, m.PowerOnViaBMC())
	must(t, h.WaitNodeReady(ctx, victim, podTimeout))
	waitTaint(ctx, t, h, victim, false)
	tUntainted := time.Now()
	_, err = h.WaitEvent(ctx, "default", victim, vocab.EventNodeRecovered, "", podTimeout)
	must(t, err)
	if m.BootID() == boot {
		t.Fatal("boot ID did not change across the power cycle")
	}
	must(t, h.WaitRingConverged(ctx, 2*time.Minute))
	for _, m := range h.Machines {
		requireAgentRuns(t, m, newBin)
	}

	requireNothingLeftBehind(ctx, t, h)
	requireSafe(t, h, sts.PV)
	for _, v := range checker.Violations() {
		t.Errorf("invariant broken: %s", v)
	}
	for _, mm := range h.Machines {
		if at, tainted := checker.TaintedAfter(mm.Name, start); tainted && mm.Name != victim {
			t.Errorf("node %s was tainted at %s, and only %s lost power", mm.Name, at.Format(time.RFC3339Nano), victim)
		}
	}
	if n := checker.TaintsWithEvidence(); n != 1 {
		t.Errorf("%d taints with evidence; want the victim's one", n)
	}
	t.Logf("rollout, each agent back in the ring after: %s", strings.Join(took, ", "))
	t.Logf("power loss at 0: tainted %.1fs, pod Running on %s %.1fs; power on: untainted %.1fs later; Events of the other nodes (the agents' restarts, and cp-1's freeze): %s",
		secs(tTaint, t0), spare, secs(tRunning, t0), secs(tUntainted, tOn), suspicions(ctx, t, h, victim))
}

// upgradeAgent replaces the agent of machine name with binary and, if the
// machine is on, waits until the new agent is back in the ring: it runs
// binary and has started, every other fencer that is on has seen it alive
// since the upgrade began, and it and every fencer see every machine that
// is on alive. It returns how long that took.
func upgradeAgent(t *testing.T, h *harness.Harness, name, binary string) time.Duration {
	t.Helper()
	m := h.Machine(name)
	var fencers []*harness.Machine
	logFrom := map[string]int{}
	on := 0
	for _, mm := range h.Machines {
		if _, up := mm.BMC.MachinePID(); up {
			on++
			logFrom[mm.Name] = len(mm.AgentLog())
			if mm.Fencer && mm != m {
				fencers = append(fencers, mm)
			}
		}
	}
	t0 := time.Now()
	must(t, m.UpgradeAgent(binary))
	if _, up := m.BMC.MachinePID(); !up {
		return 0
	}
	requireAgentRuns(t, m, binary)
	waitLine(t, m.Name, m.AgentLog, logFrom[m.Name], 2*time.Minute, `msg="agent started"`)
	for _, f := range fencers {
		waitLine(t, "fencer "+f.Name, f.AgentLog, logFrom[f.Name], 2*time.Minute, "gossip member", "node="+m.Name+" ", "to=alive")
	}
	want := fmt.Sprintf(`fenced_members{state="alive"} %d`, on)
	for _, mm := range append(fencers, m) {
		waitMetric(t, mm, want, 2*time.Minute)
	}
	return time.Since(t0)
}

// requireAgentRuns fails unless the machine's running agent runs binary.
func requireAgentRuns(t *testing.T, m *harness.Machine, binary string) {
	t.Helper()
	want, err := filepath.EvalSymlinks(binary)
	must(t, err)
	var got string
	poll.Until(t, time.Minute, m.Name+"'s agent runs "+want, func() bool {
		got, err = m.AgentExecutable()
		return err == nil && got == want
	})
}

// watchInvariants feeds checker every Node and power Lease update of the
// cluster until the test ends.
func watchInvariants(t *testing.T, h *harness.Harness, checker *soak.Checker) {
	t.Helper()
	client := h.Cluster.Client()
	nodes := informers.NewSharedInformerFactory(client, 0)
	_, err := nodes.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { checker.ObserveNode(o.(*corev1.Node)) },
		UpdateFunc: func(_, o any) { checker.ObserveNode(o.(*corev1.Node)) },
	})
	must(t, err)
	leases := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(harness.LeaseNamespace))
	_, err = leases.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) {
			if l := n.(*coordinationv1.Lease); strings.HasPrefix(l.Name, fencing.LeasePrefix) {
				checker.ObserveLeaseChange(o.(*coordinationv1.Lease), l)
			}
		},
	})
	must(t, err)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	nodes.Start(stop)
	leases.Start(stop)
	nodes.WaitForCacheSync(stop)
	leases.WaitForCacheSync(stop)
}

// requireNothingLeftBehind fails if fenced left anything of a fence: an
// out-of-service taint or a fenced annotation on a Node, a power Lease, or
// an agent key Lease that is not its node's current boot's.
func requireNothingLeftBehind(ctx context.Context, t *testing.T, h *harness.Harness) {
	t.Helper()
	client := h.Cluster.Client()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(t, err)
	boots := map[string]string{}
	for _, n := range nodes.Items {
		boots[n.Name] = n.Status.NodeInfo.BootID
		if taint.HasTaint(&n) {
			t.Errorf("node %s still has the %s taint", n.Name, taint.TaintKey)
		}
		for _, a := range []string{taint.AnnotationAppliedBy, taint.AnnotationEvidence} {
			if v, ok := n.Annotations[a]; ok {
				t.Errorf("node %s still has annotation %s: %s", n.Name, a, v)
			}
		}
	}
	leases, err := client.CoordinationV1().Leases(harness.LeaseNamespace).List(ctx, metav1.ListOptions{})
	must(t, err)
	keys := 0
	for _, l := range leases.Items {
		switch {
		case strings.HasPrefix(l.Name, fencing.LeasePrefix):
			t.Errorf("power Lease %s left behind (holder %v)", l.Name, l.Spec.HolderIdentity)
		case strings.HasPrefix(l.Name, publish.LeasePrefix):
			keys++
			node := strings.TrimPrefix(l.Name, publish.LeasePrefix)
			if boot := l.Annotations[publish.AnnotationBootID]; boot != boots[node] {
				t.Errorf("agent key Lease %s is for boot %s; node %s runs boot %s", l.Name, boot, node, boots[node])
			}
		}
	}
	if keys != len(h.Machines) {
		t.Errorf("%d agent key Leases for %d machines", keys, len(h.Machines))
	}
}

// suspicions counts, by reason, the Events of the nodes other than victim
// that say a fencer suspected one: what the agents' restarts alone caused.
func suspicions(ctx context.Context, t *testing.T, h *harness.Harness, victim string) string {
	t.Helper()
	evs, err := h.Cluster.Client().CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	must(t, err)
	counts := map[vocab.EventReason]int32{}
	for _, e := range evs.Items {
		switch r := vocab.EventReason(e.Reason); r {
		case vocab.EventNodeSuspected, vocab.EventNodeUnresponsiveButPoweredOn, vocab.EventNodeResponsive:
			if e.InvolvedObject.Name != victim {
				counts[r] += max(e.Count, 1)
			}
		}
	}
	return fmt.Sprintf("%s %d, %s %d, %s %d", vocab.EventNodeSuspected, counts[vocab.EventNodeSuspected],
		vocab.EventNodeUnresponsiveButPoweredOn, counts[vocab.EventNodeUnresponsiveButPoweredOn], vocab.EventNodeResponsive, counts[vocab.EventNodeResponsive])
}
