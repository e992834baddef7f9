package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/internal/testbed/wdemu"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// The watchdog level on the harness (docs/design.md §10): every worker has
// no power device the fencer may use — its topology is [[watchdog]] — and a
// watchdog outside it (internal/testbed/wdemu) that kills the machine's
// every process when its agent stops petting it. The agents arm it from
// an observer's configuration naming only the device, as the DaemonSet's
// would. The timeout and orderAfter are the defaults (10 s, 12 s); the
// confirm period is shorter (10 s, default 30 s), so that the scenarios
// take less time in make test — the defaults are measured in make bench
// (TestRecoveryBenchmarkWatchdog) — but on w-6, whose confirm period is
// the default.

// watchdogMachines: w-1 loses power (w-2 takes its workload), w-3's agent
// hangs, w-4 is cut off from the API server, w-5 never armed (its
// watchdog is missing), w-6 is cut off and comes back, w-7 is the
// compromised node, then has its agent restarted.
var watchdogMachines = []string{"cp-1", "w-1", "w-2", "w-3", "w-4", "w-5", "w-6", "w-7"}

// The timings the scenarios run with, and the wait they give: the order
// is seen, then the node is tainted this long after unless it showed life.
const (
	watchdogTimeout    = core.DefaultWatchdogTimeout
	watchdogConfirm    = 10 * time.Second
	watchdogOrderAfter = 12 * time.Second
)

var watchdogWait = core.WatchdogWait(core.WatchdogArm{Timeout: watchdogTimeout, Confirm: watchdogConfirm})

// TestWatchdogLevel runs the watchdog level's scenarios in two rounds of
// faults at once — no more than three of eight nodes down, so that the
// fencer keeps its gossip quorum and the storm guard its default — and
// checks the rule each time: a node is tainted only after its own
// watchdog reset it (its every process dead), never one that was not.
func TestWatchdogLevel(t *testing.T) {
	harness.Parallel(t)
	workers := watchdogMachines[1:]
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: watchdogMachines,
		Fencing: &harness.Fencing{
			Fencers: []string{"cp-1"},
			Watchdog: &harness.Watchdog{Machines: workers, NoDevice: []string{"w-5"},
				Section:         fmt.Sprintf("timeout: %s, confirm: %s, orderAfter: %s", watchdogTimeout, watchdogConfirm, watchdogOrderAfter),
				MachineSections: map[string]string{"w-6": "timeout: " + watchdogTimeout.String()}},
		},
	})
	for _, name := range workers {
		want := "1"
		if name == "w-5" {
			want = "0"
		}
		waitMetric(t, h.Machine(name), "fenced_watchdog_armed "+want, podTimeout)
	}

	t.Run("power loss, hung agent, never armed", func(t *testing.T) {
		t.Run("power loss: tainted on watchdog evidence after the wait, the workload moves", func(t *testing.T) {
			t.Parallel()
			watchdogPowerLoss(ctx, t, h, "w-1", "w-2")
		})
		t.Run("hung agent: its watchdog resets the node, tainted", func(t *testing.T) {
			t.Parallel()
			resetAndTainted(ctx, t, h, h.Machine("w-3"), (*harness.Machine).FreezeAgent)
		})
		t.Run("never armed, and a compromised node's forgeries: never ordered, never tainted", func(t *testing.T) {
			t.Parallel()
			neverArmed(ctx, t, h, h.Machine("w-5"), h.Machine("w-7"), h.Machine("w-2"))
		})
	})
	t.Run("cut off", func(t *testing.T) {
		t.Run("partitioned from the API server, not from its peers: resets itself, tainted", func(t *testing.T) {
			t.Parallel()
			m := h.Machine("w-4")
			t.Cleanup(func() { _ = m.Heal() })
			resetAndTainted(ctx, t, h, m, (*harness.Machine).PartitionFromAPI)
		})
		t.Run("back in the same boot before the wait ends: never tainted", func(t *testing.T) {
			t.Parallel()
			backBeforeTheWait(ctx, t, h, h.Machine("w-6"))
		})
		t.Run("agent restarted, killed then stopped: the next run pets in time, no reset", func(t *testing.T) {
			t.Parallel()
			m := h.Machine("w-7")
			for _, restart := range []func() error{m.RestartAgent, m.StopAndRestartAgent} {
				agentRestartedInTime(t, m, restart)
			}
		})
	})
	if v := metricValue(t, h.Machine("cp-1"), `fenced_safety_alarms_total{reason="WatchdogResetContradicted"}`); v != 0 {
		t.Errorf("%v WatchdogResetContradicted alarms", v)
	}
}

// watchdogPowerLoss pulls victim's plug with its workload on it and
// measures the recovery: the order, the taint on watchdog evidence, the
// volume released and the pod running on spare; then powers it on.
func watchdogPowerLoss(ctx context.Context, t *testing.T, h *harness.Harness, victim, spare string) {
	sts, oldPodUID := startWorkload(ctx, t, h, "wd-power-loss", victim, spare)
	m := h.Machine(victim)
	waitWriter(t, h, sts.PV, victim, 3)
	bootBefore := m.BootID()
	r, t0, err := h.PowerLossRecovery(ctx, sts, oldPodUID, victim, spare, podTimeout)
	must(t, err)
	if !r.Recovered() || r.Evidence == nil {
		t.Fatalf("not recovered within %s: %+v", podTimeout, r)
	}
	requireWatchdogEvidence(t, *r.Evidence, bootBefore, watchdogTimeout, watchdogConfirm)
	requireSafe(t, h, sts.PV)
	ordered := r.Evidence.Watchdog.OrderSeenAt.Sub(t0).Round(10 * time.Millisecond)
	t.Logf("power loss at 0: suspected %s, fence order seen %s, tainted %s (wait %s), volume released %s, pod Running on %s %s; "+
		"volume released %s after the order, T+W+margin+1 s = %s",
		r.Detected, ordered, r.Tainted, time.Duration(r.Evidence.Watchdog.Wait), r.VolumeReleased, spare, r.PodRunning,
		(r.VolumeReleased - ordered).Round(10*time.Millisecond), watchdogWait+time.Second)
	must(t, h.PowerOnRecovery(ctx, &r, victim, t0, podTimeout))
	waitOrderGone(ctx, t, h, victim)
	t.Logf("switched on at %s: Ready %s, taint removed %s, its fence order withdrawn", r.PoweredOn, r.NodeBack, r.TaintRemoved)
}

// resetAndTainted applies fault to m and waits until m's own watchdog
// resets it (the machine held off then, as a server still in its
// firmware), the node never tainted before; then until it is tainted on
// watchdog evidence for the boot that ran; then switches it on again and
// waits for the taint to go and the order to be withdrawn.
func resetAndTainted(ctx context.Context, t *testing.T, h *harness.Harness, m *harness.Machine, fault func(*harness.Machine) error) {
	m.HoldAfterWatchdogReset(true)
	t.Cleanup(func() { m.HoldAfterWatchdogReset(false) })
	bootBefore := m.BootID()
	pgid, err := m.ProcessGroup()
	must(t, err)
	resets := m.WatchdogResets()
	t0 := time.Now()
	must(t, fault(m))
	waitResetUntainted(ctx, t, h, m, resets)
	tReset := time.Now()
	requireBootGone(t, m, pgid)
	n := waitTaint(ctx, t, h, m.Name, true)
	tTaint := time.Now()
	ev, ok, err := taint.EvidenceOf(n)
	if err != nil || !ok {
		t.Fatalf("evidence of the taint: %v, %v", ok, err)
	}
	requireWatchdogEvidence(t, ev, bootBefore, watchdogTimeout, watchdogConfirm)
	t.Logf("fault at 0: reset by its watchdog %.1fs, fence order seen %.1fs, tainted %.1fs",
		secs(tReset, t0), secs(ev.Watchdog.OrderSeenAt, t0), secs(tTaint, t0))
	must(t, m.Heal())
	must(t, m.PowerOnViaBMC())
	must(t, h.WaitNodeReady(ctx, m.Name, podTimeout))
	waitTaint(ctx, t, h, m.Name, false)
	waitOrderGone(ctx, t, h, m.Name)
}

// neverArmed: victim's agent found no watchdog to arm, so it stated none.
// A compromised node (attacker: the gossip key and its own agent's
// credentials) states victim armed, signed with a key of its own, and
// orders a healthy node reset: the API server refuses both. Then victim
// loses power: it is never ordered and never tainted, and the fencer says
// why.
func neverArmed(ctx context.Context, t *testing.T, h *harness.Harness, victim, attacker, healthy *harness.Machine) {
	if victim.WatchdogArmed() {
		t.Fatalf("%s has a watchdog counting down", victim.Name)
	}
	client, err := h.AgentClient(attacker)
	must(t, err)
	key, err := identity.NewKey()
	must(t, err)
	forged := identity.Armed{Timeout: watchdogTimeout, Confirm: watchdogConfirm, Device: wdemu.Identity}
	err = publish.PublishArmed(ctx, client, harness.LeaseNamespace, victim.Name, victim.BootID(), key, forged)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("%s stating %s's watchdog armed: %v, want Forbidden", attacker.Name, victim.Name, err)
	}
	err = publish.WriteOrder(ctx, client, harness.LeaseNamespace, healthy.Name, healthy.BootID(), attacker.Name)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("%s ordering %s reset: %v, want Forbidden", attacker.Name, healthy.Name, err)
	}
	t.Logf("refused: %v", err)

	must(t, victim.PowerLoss())
	ev, err := h.WaitEvent(ctx, "default", victim.Name, vocab.EventCannotConfirmPowerState, "stated no armed watchdog", podTimeout)
	must(t, err)
	t.Logf("the fencer: %s", ev.Message)
	// Past the order's silence and the wait it would have had.
	requireNoTaintFor(ctx, t, h, victim.Name, watchdogOrderAfter+watchdogWait+15*time.Second)
	if _, found, err := publish.ReadOrder(ctx, h.Cluster.Client(), harness.LeaseNamespace, victim.Name); err != nil || found {
		t.Fatalf("a fence order for %s (found %v, %v)", victim.Name, found, err)
	}
	if _, found, err := publish.ReadOrder(ctx, h.Cluster.Client(), harness.LeaseNamespace, healthy.Name); err != nil || found {
		t.Fatalf("a fence order for %s (found %v, %v)", healthy.Name, found, err)
	}
	must(t, victim.PowerOnViaBMC())
	must(t, h.WaitNodeReady(ctx, victim.Name, podTimeout))
}

// backBeforeTheWait cuts m off — from peers and API server — until a fence
// order for its boot is written, then heals it long before its watchdog
// can have fired (confirm 30 s): it shows life in the same boot, so the
// order's evidence is void and it is never tainted. Its agent then reads
// the order and lets its watchdog reset it; back in another boot, the
// order is withdrawn.
func backBeforeTheWait(ctx context.Context, t *testing.T, h *harness.Harness, m *harness.Machine) {
	t.Cleanup(func() { _ = m.Heal() })
	bootBefore := m.BootID()
	resets := m.WatchdogResets()
	t0 := time.Now()
	must(t, m.Isolate())
	err := poll.UntilContext(ctx, 200*time.Millisecond, podTimeout, func(ctx context.Context) bool {
		ord, found, err := publish.ReadOrder(ctx, h.Cluster.Client(), harness.LeaseNamespace, m.Name)
		return err == nil && found && ord.BootID == bootBefore
	})
	must(t, err)
	tOrder := time.Now()
	if m.WatchdogResets() != resets {
		t.Fatalf("%s was reset before its order was written (%.1fs after it was cut off): the scenario needs it alive", m.Name, secs(tOrder, t0))
	}
	must(t, m.Heal())
	// Never tainted until it is back in another boot, its order gone.
	err = poll.UntilContext(ctx, 250*time.Millisecond, podTimeout, func(ctx context.Context) bool {
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		if taint.HasTaint(n) {
			t.Fatalf("%s tainted: %s", m.Name, n.Annotations[taint.AnnotationEvidence])
		}
		_, found, err := publish.ReadOrder(ctx, h.Cluster.Client(), harness.LeaseNamespace, m.Name)
		return err == nil && !found && n.Status.NodeInfo.BootID != bootBefore && harness.NodeReady(n) == corev1.ConditionTrue
	})
	must(t, err)
	t.Logf("cut off at 0: fence order %.1fs, healed then; reset by its watchdog (%d), back in another boot and its order withdrawn %.1fs, never tainted",
		secs(tOrder, t0), m.WatchdogResets()-resets, time.Since(t0).Seconds())
	// What kept it untainted was its life in the boot the order was for,
	// not only its new boot.
	ev, err := h.WaitEvent(ctx, "default", m.Name, vocab.EventFenceEvidenceVoided, "watchdog evidence", podTimeout)
	must(t, err)
	if !strings.Contains(ev.Message, "answered a liveness challenge") && !strings.Contains(ev.Message, "renewed its node Lease") {
		t.Fatalf("the order's evidence voided for another reason than life in its boot: %s", ev.Message)
	}
	t.Logf("the fencer: %s", ev.Message)
	if m.WatchdogResets() == resets {
		t.Errorf("%s back in another boot without its watchdog resetting it", m.Name)
	}
}

// agentRestartedInTime restarts m's agent with restart — a crash
// (SIGKILL) or a stop that is no clean shutdown (SIGTERM): the watchdog
// stays armed, and the next run of the same boot opens and pets it before
// it fires, and states it armed again.
func agentRestartedInTime(t *testing.T, m *harness.Machine, restart func() error) {
	t.Helper()
	resets, boot := m.WatchdogResets(), m.BootID()
	log := len(m.AgentLog())
	must(t, restart())
	tRestart := time.Now()
	waitLine(t, m.Name+"'s next agent", m.AgentLog, log, podTimeout, "watchdog armed")
	waitMetric(t, m, "fenced_watchdog_armed 1", podTimeout)
	if !m.WatchdogArmed() || m.WatchdogResets() != resets || m.BootID() != boot {
		t.Fatalf("%s after its agent's restart: armed %v, resets %d (was %d), boot %s (was %s)",
			m.Name, m.WatchdogArmed(), m.WatchdogResets(), resets, m.BootID(), boot)
	}
	t.Logf("%s: the next run armed and stated its watchdog %.1fs after the restart, same boot, no reset",
		m.Name, time.Since(tRestart).Seconds())
}

// requireWatchdogEvidence fails unless ev is watchdog evidence for boot,
// with the figures the node's armed statement gave and a wait that
// bounds the reset.
func requireWatchdogEvidence(t *testing.T, ev core.Evidence, boot string, timeout, confirm time.Duration) {
	t.Helper()
	w := ev.Watchdog
	if ev.Method != vocab.EvidenceWatchdog || w == nil || ev.BootID != boot {
		t.Fatalf("evidence %+v, want method %s for boot %s", ev, vocab.EvidenceWatchdog, boot)
	}
	want := core.WatchdogWait(core.WatchdogArm{Timeout: timeout, Confirm: confirm})
	if time.Duration(w.Timeout) != timeout || time.Duration(w.Confirm) != confirm || w.Device != wdemu.Identity || w.Software ||
		time.Duration(w.Wait) != want || ev.At.Before(w.ResetBy()) {
		t.Fatalf("watchdog evidence %+v at %s, want timeout %s, confirm %s, device %q, hardware, wait %s, taken after it", *w, ev.At, timeout, confirm, wdemu.Identity, want)
	}
}

// waitResetUntainted waits until m's watchdog has reset it more than
// before times, failing if its node is tainted first.
func waitResetUntainted(ctx context.Context, t *testing.T, h *harness.Harness, m *harness.Machine, before int) {
	t.Helper()
	err := poll.UntilContext(ctx, 100*time.Millisecond, podTimeout, func(ctx context.Context) bool {
		if n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{}); err == nil && taint.HasTaint(n) && m.WatchdogResets() == before {
			t.Fatalf("%s tainted before its watchdog reset it: %s", m.Name, n.Annotations[taint.AnnotationEvidence])
		}
		return m.WatchdogResets() > before
	})
	if err != nil {
		t.Fatalf("%s: its watchdog did not reset it within %s", m.Name, podTimeout)
	}
}

// waitOrderGone waits until node has no fence order.
func waitOrderGone(ctx context.Context, t *testing.T, h *harness.Harness, node string) {
	t.Helper()
	err := poll.UntilContext(ctx, 200*time.Millisecond, podTimeout, func(ctx context.Context) bool {
		_, found, err := publish.ReadOrder(ctx, h.Cluster.Client(), harness.LeaseNamespace, node)
		return err == nil && !found
	})
	if err != nil {
		t.Fatalf("%s's fence order still there %s after it came back", node, podTimeout)
	}
}
