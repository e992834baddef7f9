package e2e

import (
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestCleanShutdown shuts machines down the way `systemctl poweroff` does:
// through their logind, with the kubelet's graceful node shutdown and the
// fenced agent each holding a delay lock. A clean shutdown ends in a taint
// with clean-shutdown evidence and not a single BMC request for the node;
// a shutdown that leaves a CSI volume mounted gets no taint until the BMC
// reads off.
func TestCleanShutdown(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}},
	})
	fencer := h.Machine("cp-1")

	t.Run("volumes unmounted: tainted with clean-shutdown evidence, no BMC request", func(t *testing.T) {
		t.Parallel()
		victim, spare := "w-1", "w-3"
		sts, oldPodUID := startWorkload(ctx, t, h, "clean-shutdown", victim, spare)
		m := h.Machine(victim)
		waitWriter(t, h, sts.PV, victim, 3)
		bootBefore := m.BootID()

		t0 := time.Now()
		must(t, m.Shutdown(ctx))
		n := waitTaint(ctx, t, h, victim, true)
		tTaint := time.Now()
		ev, ok, err := taint.EvidenceOf(n)
		if err != nil || !ok || ev.Method != vocab.EvidenceCleanShutdown || ev.BMC != nil || ev.BootID != bootBefore {
			t.Fatalf("evidence %+v (ok %v, err %v), boot before %s", ev, ok, err, bootBefore)
		}
		t.Logf("evidence: %s", ev.Reason)
		if reqs := bmcRequestsFor(fencer, victim, t0); len(reqs) > 0 {
			t.Fatalf("the fencer asked the BMC of a node that shut down cleanly:\n%s", strings.Join(reqs, "\n"))
		}
		waitPower(t, m, "off") // logind went on once the locks were released
		tOff := time.Now()
		_, tVAGone, tRunning := requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
		requireSafe(t, h, sts.PV)
		agentLog := m.AgentLog() // complete: the machine is off
		for _, want := range []string{"announcing shutting-down", "announced shutdown-complete", "releasing the shutdown lock"} {
			if !strings.Contains(agentLog, want) {
				t.Errorf("agent log of %s lacks %q", victim, want)
			}
		}
		t.Logf("timeline (shutdown requested at 0): tainted %.1fs, BMC reads off %.1fs, old VolumeAttachment gone %.1fs, pod Running on %s %.1fs",
			secs(tTaint, t0), secs(tOff, t0), secs(tVAGone, t0), spare, secs(tRunning, t0))
		if reqs := bmcRequestsFor(fencer, victim, t0); len(reqs) > 0 {
			t.Fatalf("BMC requests for %s after the taint:\n%s", victim, strings.Join(reqs, "\n"))
		}

		// Switched on again: a new boot, and the taint goes.
		must(t, m.PowerOnViaBMC())
		must(t, h.WaitNodeReady(ctx, victim, podTimeout))
		waitTaint(ctx, t, h, victim, false)
		if m.BootID() == bootBefore {
			t.Fatal("boot ID did not change across the shutdown")
		}
	})

	t.Run("a CSI volume stays mounted: no taint until the BMC reads off", func(t *testing.T) {
		t.Parallel()
		victim, spare := "w-2", "w-3"
		sts, oldPodUID := startWorkload(ctx, t, h, "held-mounts", victim, spare)
		m := h.Machine(victim)
		waitWriter(t, h, sts.PV, victim, 3)
		bootBefore := m.BootID()
		must(t, m.HoldMounts()) // the CSI plugin's unmount fails: "target is busy"
		t.Cleanup(func() { _ = m.ReleaseMounts() })
		// A BMC that does not answer: without shutdown-complete, nothing
		// but a BMC reading of off may lead to a taint.
		m.BMCDown()
		t.Cleanup(m.BMCUp)

		t0 := time.Now()
		must(t, m.Shutdown(ctx))
		// The agent gives up waiting for the unmount and leaves without
		// shutdown-complete; the fencer then goes to the BMC, which is down.
		ev, err := h.WaitEvent(ctx, "default", victim, vocab.EventCannotConfirmPowerState, "timeout", podTimeout)
		must(t, err)
		tAsked := time.Now()
		t.Logf("event: %s", ev.Message)
		if !strings.Contains(m.AgentLog(), "CSI volumes still mounted: not announcing shutdown-complete") {
			t.Errorf("agent log of %s lacks the held mounts:\n%s", victim, m.AgentLog())
		}
		requireNoTaintFor(ctx, t, h, victim, 20*time.Second)

		m.BMCUp()
		n := waitTaint(ctx, t, h, victim, true)
		tTaint := time.Now()
		evidence, ok, err := taint.EvidenceOf(n)
		if err != nil || !ok || evidence.Method != vocab.EvidenceBMCPowerOff || evidence.BMC == nil || evidence.BMC.Power != "off" || evidence.BootID != bootBefore {
			t.Fatalf("evidence %+v (ok %v, err %v), boot before %s", evidence, ok, err, bootBefore)
		}
		requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
		requireSafe(t, h, sts.PV)
		t.Logf("timeline (shutdown requested at 0): agent left, BMC asked %.1fs, BMC up again and tainted %.1fs", secs(tAsked, t0), secs(tTaint, t0))

		must(t, m.ReleaseMounts())
		must(t, m.PowerOnViaBMC())
		must(t, h.WaitNodeReady(ctx, victim, podTimeout))
		waitTaint(ctx, t, h, victim, false)
	})
}

// bmcRequestsFor returns the fencer's log lines of BMC requests for node
// logged after since (a fencer may read a machine's BMC while the harness
// boots it, before the scenario begins).
func bmcRequestsFor(fencer *harness.Machine, node string, since time.Time) []string {
	var out []string
	for _, line := range strings.Split(fencer.AgentLog(), "\n") {
		if !strings.Contains(line, "msg=bmc component=fencer node="+node+" ") {
			continue
		}
		if at, ok := lineTime(line); !ok || !at.Before(since) {
			out = append(out, line)
		}
	}
	return out
}
