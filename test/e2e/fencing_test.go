package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestConfirmOnlyFencing runs fenced in its default mode: it taints only
// nodes whose BMC reads off.
func TestConfirmOnlyFencing(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3", "w-4", "w-5", "w-6", "w-7"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}, BMCIdentityMismatch: []string{"w-7"}},
	})
	fencer := h.Machine("cp-1")

	t.Run("power loss: tainted with bmc-power-off evidence, workload moves, taint removed after power on", func(t *testing.T) {
		t.Parallel()
		powerLossFencedAndRecovered(ctx, t, h, "w-1", "w-2")
	})
	// Faults that leave the node switched on: its BMC reads on, so it is
	// never tainted, however unreachable the node is.
	poweredOnFaults := []struct {
		machine, name string
		breakNode     func(*harness.Machine) error
		repair        func(*harness.Machine) error
		cleared       bool // after the repair, wait for SuspicionCleared and still no taint
	}{
		{"w-3", "hang", (*harness.Machine).Hang, (*harness.Machine).Resume, true},
		{"w-4", "full isolation", (*harness.Machine).Isolate, (*harness.Machine).Heal, false},
	}
	for _, f := range poweredOnFaults {
		t.Run(f.name+": BMC reads on, never tainted", func(t *testing.T) {
			t.Parallel()
			m := h.Machine(f.machine)
			must(t, f.breakNode(m))
			t.Cleanup(func() { _ = f.repair(m) })
			_, err := h.WaitEvent(ctx, "default", m.Name, vocab.EventNodeUnresponsiveButPoweredOn, "reads on", podTimeout)
			must(t, err)
			must(t, h.WaitNodeNotReady(ctx, m.Name, notReadyTimeout))
			requireNoTaintFor(ctx, t, h, m.Name, 15*time.Second)
			must(t, f.repair(m))
			must(t, h.WaitNodeReady(ctx, m.Name, notReadyTimeout))
			if !f.cleared {
				return
			}
			_, err = h.WaitEvent(ctx, "default", m.Name, vocab.EventNodeResponsive, "", podTimeout)
			must(t, err)
			requireNoTaintFor(ctx, t, h, m.Name, time.Second)
		})
	}
	bmcFaults := []struct {
		machine, name string
		breakBMC      func(*harness.Machine) error
		repair        func(*harness.Machine) error
		kind          string // fenced_bmc_requests_total result
		message       string // in the CannotConfirmPowerState event
	}{
		{"w-5", "BMC unreachable (hung)", func(m *harness.Machine) error { m.BMCDown(); return nil },
			func(m *harness.Machine) error { m.BMCUp(); return nil }, "timeout", "timeout"},
		{"w-6", "BMC refuses the password", (*harness.Machine).BMCWrongPassword, (*harness.Machine).RestoreBMCPassword, "auth", "auth"},
		{"w-7", "BMC is another machine's (GUID mismatch)", nil, nil, "ok", "is not this node's systemUUID"},
	}
	for _, f := range bmcFaults {
		t.Run("power loss with "+f.name+": not tainted until the BMC confirms", func(t *testing.T) {
			t.Parallel()
			m := h.Machine(f.machine)
			if f.breakBMC != nil {
				must(t, f.breakBMC(m))
			}
			must(t, m.PowerLoss())
			ev, err := h.WaitEvent(ctx, "default", m.Name, vocab.EventCannotConfirmPowerState, f.message, podTimeout)
			must(t, err)
			t.Logf("event: %s", ev.Message)
			requireNoTaintFor(ctx, t, h, m.Name, 20*time.Second)
			if v := metricValue(t, fencer, `fenced_bmc_requests_total{op="power-status",result="`+f.kind+`"}`); v < 1 {
				t.Fatalf("fenced_bmc_requests_total for result %s is %v", f.kind, v)
			}
			if f.repair == nil {
				return
			}
			// Once the BMC answers again, it says off: now there is evidence.
			must(t, f.repair(m))
			waitTaint(ctx, t, h, m.Name, true)
		})
	}
}

func powerLossFencedAndRecovered(ctx context.Context, t *testing.T, h *harness.Harness, victim, spare string) {
	sts, oldPodUID := startWorkload(ctx, t, h, "fenced-power-loss", victim, spare)
	m := h.Machine(victim)
	waitWriter(t, h, sts.PV, victim, 3)
	bootBefore := m.BootID()

	t0 := time.Now()
	must(t, m.PowerLoss())
	ev, err := h.WaitEvent(ctx, "default", victim, "NodeSuspected", "", podTimeout)
	must(t, err)
	tSuspected := time.Now()
	t.Logf("suspected: %s", ev.Message)
	requireBMCOffEvidence(t, waitTaint(ctx, t, h, victim, true), bootBefore)
	tTaint := time.Now()
	_, tVAGone, tRunning := requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
	requireSafe(t, h, sts.PV)
	t.Logf("timeline (power loss at 0): suspected %.1fs, tainted %.1fs, old VolumeAttachment gone %.1fs, pod Running on %s %.1fs",
		secs(tSuspected, t0), secs(tTaint, t0), secs(tVAGone, t0), spare, secs(tRunning, t0))

	// Power back on: new boot, the taint goes away, the node is usable.
	must(t, m.PowerOnViaBMC())
	must(t, h.WaitNodeReady(ctx, victim, podTimeout))
	waitTaint(ctx, t, h, victim, false)
	if m.BootID() == bootBefore {
		t.Fatal("boot ID did not change across the power cycle")
	}
	_, err = h.WaitEvent(ctx, "default", victim, "NodeRecovered", "", podTimeout)
	must(t, err)
}

// requireBMCOffEvidence fails unless fenced's taint on n carries
// bmc-power-off evidence read off on bootBefore, the boot that lost power.
func requireBMCOffEvidence(t *testing.T, n *corev1.Node, bootBefore string) {
	t.Helper()
	evidence, ok, err := taint.EvidenceOf(n)
	if err != nil || !ok || evidence.Method != vocab.EvidenceBMCPowerOff || evidence.BMC == nil || evidence.BMC.Power != "off" || evidence.BootID != bootBefore {
		t.Fatalf("evidence %+v (ok %v, err %v), boot before %s", evidence, ok, err, bootBefore)
	}
}

// waitTaint waits until node has (or no longer has) fenced's out-of-service taint.
func waitTaint(ctx context.Context, t *testing.T, h *harness.Harness, node string, want bool) *corev1.Node {
	t.Helper()
	var n *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		n, err = h.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return (taint.HasTaint(n) && taint.AppliedByFenced(n)) == want, nil
	})
	if err != nil {
		t.Fatalf("node %s: fenced taint present=%v after %s; want %v; taints %v", node, !want, podTimeout, want, taintKeys(n))
	}
	return n
}

func taintKeys(n *corev1.Node) string {
	if n == nil {
		return "?"
	}
	var k []string
	for _, t := range n.Spec.Taints {
		k = append(k, t.Key)
	}
	return strings.Join(k, ",")
}

// requireNoTaintFor fails if node gets fenced's taint within d.
func requireNoTaintFor(ctx context.Context, t *testing.T, h *harness.Harness, node string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		must(t, err)
		if taint.HasTaint(n) {
			t.Fatalf("node %s was tainted: %v", node, n.Annotations[taint.AnnotationEvidence])
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// metricValue reads one series from the machine's agent metrics (0 if absent).
func metricValue(t *testing.T, m *harness.Machine, series string) float64 {
	t.Helper()
	text, err := m.Metrics()
	must(t, err)
	v, err := seriesValue(text, series)
	must(t, err)
	return v
}

// seriesValue is the value of series in a metrics page, 0 when the page
// has no such series.
func seriesValue(text, series string) (float64, error) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, nil
}

// TestPowerOffFencing runs two fencers in power-off mode on seven nodes.
// The scenarios run one after the other: each changes how many nodes are
// down, which the storm guard counts.
func TestPowerOffFencing(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "cp-2", "w-1", "w-2", "w-3", "w-4", "w-5"},
		Fencing: &harness.Fencing{Fencers: []string{"cp-1", "cp-2"},
			Policy: `{mode: power-off, fenceAfter: 5s, fenceDelay: 10s, maxUnhealthy: "30%", afterFence: "on"}`},
	})

	t.Run("storm: 3 of 7 nodes hung, no power action", func(t *testing.T) {
		var hungs []*harness.Machine
		for _, name := range []string{"w-3", "w-4", "w-5"} {
			m := h.Machine(name)
			must(t, m.Hang())
			hungs = append(hungs, m)
		}
		t.Cleanup(func() {
			for _, m := range hungs {
				_ = m.Resume()
			}
		})
		for _, m := range hungs {
			_, err := h.WaitEvent(ctx, "default", m.Name, vocab.EventNodeUnresponsiveButPoweredOn, "storm", notReadyTimeout)
			must(t, err)
		}
		// Well past NotReady and fenceAfter: still nobody switched off.
		for _, m := range hungs {
			requireNoTaintFor(ctx, t, h, m.Name, 5*time.Second)
			waitPower(t, m, "on")
		}
		requirePowerOffs(t, h, 0)
		for _, m := range hungs {
			must(t, m.Resume())
		}
		for _, m := range hungs {
			must(t, h.WaitNodeReady(ctx, m.Name, notReadyTimeout))
		}
		// The next scenario counts down nodes for the storm guard, and a
		// node gossip still calls dead counts: start it from a whole ring.
		must(t, h.WaitRingConverged(ctx, podTimeout))
	})

	t.Run("partition from the API server only: peers see it, no taint, no power action", func(t *testing.T) {
		m := h.Machine("w-5")
		must(t, m.PartitionFromAPI())
		t.Cleanup(func() { _ = m.Heal() })
		must(t, h.WaitNodeNotReady(ctx, m.Name, notReadyTimeout))
		_, err := h.WaitEvent(ctx, "default", m.Name, vocab.EventNodeUnresponsiveButPoweredOn, "its agent answers liveness challenges", podTimeout)
		must(t, err)
		requireNoTaintFor(ctx, t, h, m.Name, 15*time.Second)
		waitPower(t, m, "on")
		requirePowerOffs(t, h, 0)
		must(t, m.Heal())
		must(t, h.WaitNodeReady(ctx, m.Name, notReadyTimeout))
		must(t, h.WaitRingConverged(ctx, podTimeout))
	})

	t.Run("hang: switched off under the Lease, fencer killed mid-fence, the other completes; workload moves; power back on", func(t *testing.T) {
		victim, spare := "w-1", "w-2"
		sts, oldPodUID := startWorkload(ctx, t, h, "power-off", victim, spare)
		m := h.Machine(victim)
		waitWriter(t, h, sts.PV, victim, 3)
		bootBefore := m.BootID()
		hungBoot, err := m.ProcessGroup()
		must(t, err)
		must(t, m.Hang())
		t.Cleanup(func() { _ = m.Resume() })

		// The first fencer to take the Lease waits out the fence delay...
		holder := waitLeaseHolder(ctx, t, h, victim)
		_, err = h.WaitEvent(ctx, "default", victim, vocab.EventPoweringOffUnresponsiveNode, "switching it off", podTimeout)
		must(t, err)
		// ...and dies before switching: the other one must take over.
		must(t, h.Machine(holder).KillAgent())
		t.Logf("killed fencer %s while it held the power Lease of %s", holder, victim)

		n := waitTaint(ctx, t, h, victim, true)
		ev, _, err := taint.EvidenceOf(n)
		must(t, err)
		if ev.Method != vocab.EvidenceBMCPowerOff || ev.BMC == nil || !ev.BMC.PoweredOffByFenced || ev.By == holder || ev.BootID != bootBefore {
			t.Fatalf("evidence %+v (killed fencer %s, boot before %s)", ev, holder, bootBefore)
		}
		requirePowerOffs(t, h, 1)
		requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
		// The hung writer was killed by the power-off: it can never resume.
		requireBootGone(t, m, hungBoot)
		requireSafe(t, h, sts.PV)

		// afterFence: on — the volumes are released, so it is switched on
		// again, boots anew, and the taint goes.
		must(t, h.WaitNodeReady(ctx, victim, podTimeout))
		waitTaint(ctx, t, h, victim, false)
		if m.BootID() == bootBefore {
			t.Fatal("the node came back with the same boot ID")
		}
		requireSafe(t, h, sts.PV)
	})
}

// waitLeaseHolder waits for node's power Lease and returns its holder.
func waitLeaseHolder(ctx context.Context, t *testing.T, h *harness.Harness, node string) string {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		l, err := h.Cluster.Client().CoordinationV1().Leases(harness.LeaseNamespace).Get(ctx, fencing.LeasePrefix+node, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return holder != "", nil
	})
	must(t, err)
	return holder
}

// requirePowerOffs checks how many power-off requests all fencers sent,
// from their logs (a killed fencer's metrics die with it; its log stays).
func requirePowerOffs(t *testing.T, h *harness.Harness, want int) {
	t.Helper()
	got := 0
	for _, m := range h.Machines {
		if m.Fencer {
			got += strings.Count(m.AgentLog(), "msg=bmc component=fencer node=") - strings.Count(m.AgentLog(), "op=power-status") - strings.Count(m.AgentLog(), "op=power-on")
		}
	}
	if got != want {
		t.Fatalf("%d power-off requests sent by the fencers, want %d", got, want)
	}
}
