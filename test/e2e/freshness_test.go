package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestEvidenceFreshness: evidence must be true when the taint lands.
// The API server goes away across a power loss; a fencer dies
// between its taint and the rest of the fence. The scenarios run one after
// the other: an API outage is felt by every node.
func TestEvidenceFreshness(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3"},
		// A BMC request may wait 5 s for its answer (a slow BMC below).
		Fencing: &harness.Fencing{Fencers: []string{"cp-1"}, BMCTimeout: 5 * time.Second},
	})
	fencer := h.Machine("cp-1")
	client := h.Cluster.Client()
	// How old a reading a taint may rest on (the harness's fencers run the
	// default policy).
	maxEvidenceAge := core.DefaultPolicy().MaxEvidenceAge
	// The workload of the second scenario starts before any outage.
	sts, oldPodUID := startWorkload(ctx, t, h, "fresh-off", "w-2", "w-3")

	// waitPowerOffRead waits for the fencer's BMC reading of off for node
	// (taken while the API server is away, so it cannot be written) and
	// returns when the fencer logged it, just after the BMC answered.
	waitPowerOffRead := func(t *testing.T, node string, since time.Time) time.Time {
		t.Helper()
		var read time.Time
		poll.Until(t, podTimeout, "the fencer reads "+node+"'s BMC as off", func() bool {
			for _, l := range bmcRequestsFor(fencer, node, since) {
				if at, ok := lineTime(l); ok && strings.Contains(l, "power=off") {
					read = at
					return true
				}
			}
			return false
		})
		return read
	}
	apiDown := func(t *testing.T) {
		t.Helper()
		h.Cluster.StopAPIServer()
		t.Cleanup(func() {
			if h.Cluster.APIServerDown() {
				_ = h.Cluster.StartAPIServer(ctx)
			}
		})
	}

	t.Run("API down across a power loss and the node's return: never tainted", func(t *testing.T) {
		victim := "w-1"
		m := h.Machine(victim)
		boot := m.BootID()
		apiDown(t)
		t0 := time.Now()
		must(t, m.PowerLoss())
		read := waitPowerOffRead(t, victim, t0)
		tRead := time.Now()
		must(t, m.PowerOnViaBMC()) // back on its new boot while the API is still away
		// The API server stays away until the machine runs its new boot,
		// its agent up, and the reading of off is older than any taint may
		// rest on.
		poll.Until(t, podTimeout, victim+" runs a new boot with its agent, and the reading of off is older than "+maxEvidenceAge.String(), func() bool {
			_, err := m.AgentPID()
			return m.BootID() != boot && err == nil && time.Since(read) > maxEvidenceAge
		})
		must(t, h.Cluster.StartAPIServer(ctx))
		tAPI := time.Now()
		must(t, h.WaitNodeReady(ctx, victim, podTimeout))
		requireNoTaintFor(ctx, t, h, victim, 20*time.Second)
		if m.BootID() == boot {
			t.Fatal("the machine did not reboot")
		}
		// The fencer said why it did not taint: its decision, and the Event
		// it sent while the API server was away.
		decision := ""
		for _, l := range strings.Split(fencer.AgentLog(), "\n") {
			if strings.Contains(l, "msg=decision component=fencer node="+victim+" ") && strings.Contains(l, "Event:"+string(vocab.EventFenceEvidenceVoided)) && lineAfter(l, t0) {
				decision = l
				break
			}
		}
		if decision == "" {
			t.Fatalf("the fencer never decided that its reading of %s was void or too old", victim)
		}
		said := "event: "
		// client-go's recorder retries an Event the API server did not
		// take, with its own back-off.
		ev, err := h.WaitEvent(ctx, "default", victim, vocab.EventFenceEvidenceVoided, "", podTimeout)
		switch {
		case err == nil:
			said += ev.Message
		case strings.Contains(fencer.AgentLog(), "Server rejected event"):
			// client-go's recorder retries an Event while the server is
			// unreachable but drops one it refuses, and a kube-apiserver
			// that has just started refuses requests (403) until its RBAC
			// cache is filled: the Event can be lost, the decision stands.
			said = "the Event was refused by the restarting API server (403 before its RBAC cache filled) and dropped by client-go; the decision: " + decision
		default:
			t.Fatal(err)
		}
		t.Logf("timeline (power loss at 0): BMC read off %.1fs, API back %.1fs; no taint; %s",
			secs(tRead, t0), secs(tAPI, t0), said)
	})

	t.Run("API down across a power loss, node still off: tainted within seconds of the API's return", func(t *testing.T) {
		victim, spare := "w-2", "w-3"
		waitWriter(t, h, sts.PV, victim, writerRecords(t, h, sts.PV, victim)+3)
		m := h.Machine(victim)
		apiDown(t)
		t0 := time.Now()
		must(t, m.PowerLoss())
		read := waitPowerOffRead(t, victim, t0)
		tRead := time.Now()
		poll.Until(t, podTimeout, "the reading of off is older than "+maxEvidenceAge.String(), func() bool {
			return time.Since(read) > maxEvidenceAge
		})
		tStart := time.Now()
		must(t, h.Cluster.StartAPIServer(ctx))
		tAPI := time.Now()
		n := waitTaint(ctx, t, h, victim, true)
		tTaint := time.Now()
		ev, ok, err := taint.EvidenceOf(n)
		// Not the first reading, which got too old during the outage: one
		// read after it, at most maxEvidenceAge old when the taint was
		// written — by the taint's own time, which the fencer stamps as it
		// writes (to the second, rounded down), not by when this test saw
		// it: on a loaded machine that may be seconds later. The second of
		// margin is for the fencer's check of the age and its stamp.
		written := taintAdded(n)
		if err != nil || !ok || ev.Method != vocab.EvidenceBMCPowerOff || ev.BMC == nil || !ev.BMC.At.After(read) ||
			written.IsZero() || written.Sub(ev.BMC.At) > maxEvidenceAge+time.Second {
			t.Fatalf("evidence %+v (reading %+v): want a reading read again after the first one (logged %s) and at most %s old when written (%s)",
				ev, ev.BMC, read.Format(time.RFC3339Nano), maxEvidenceAge, written.Format(time.RFC3339Nano))
		}
		// A renewal of the kubelet's Lease from before the power loss that
		// the fencer's informer saw only after the outage is no sign of
		// life after the reading (the reading's baseline is read from the
		// API server): no contradiction is raised.
		for _, l := range strings.Split(fencer.AgentLog(), "\n") {
			if strings.Contains(l, "SAFETY ALARM") && strings.Contains(l, "node="+victim+" ") && lineAfter(l, t0) {
				t.Fatalf("a safety alarm for %s, which only lost its power: %s", victim, l)
			}
		}
		// The rest of the fence follows: not Ready (False PoweredOff from
		// fenced, or Unknown from the node lifecycle controller if its grace
		// period ran out first: fenced leaves that alone), pods force-deleted.
		poll.Until(t, podTimeout, victim+" is not Ready (PoweredOff, or Unknown)", func() bool {
			n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
			if err != nil {
				return false
			}
			c := taint.ReadyCondition(n)
			return c != nil && (c.Status == corev1.ConditionFalse && c.Reason == taint.ReasonPoweredOff || c.Status == corev1.ConditionUnknown)
		})
		tPoweredOff := time.Now()
		podGone, vaGone, running := requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
		requireSafe(t, h, sts.PV)
		t.Logf("timeline (API server started at 0, ready at %.1fs; first reading %.1fs before): reading used %.1fs, tainted %.1fs (seen %.1fs), not Ready %.1fs, pod gone %.1fs, volume released %.1fs, pod Running on %s %.1fs",
			secs(tAPI, tStart), secs(tStart, tRead), secs(ev.BMC.At, tStart), secs(written, tStart), secs(tTaint, tStart), secs(tPoweredOff, tStart), secs(podGone, tStart), secs(vaGone, tStart), spare, secs(running, tStart))
		must(t, m.PowerOnViaBMC())
		must(t, h.WaitNodeReady(ctx, victim, podTimeout))
		waitTaint(ctx, t, h, victim, false)
	})

	t.Run("fencer died between taint and PoweredOff, node back within the grace period: taint removed after its restart", func(t *testing.T) {
		victim := "w-1"
		m := h.Machine(victim)
		n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		must(t, err)
		boot := n.Status.NodeInfo.BootID
		// The fencer froze right after writing its taint: the test writes
		// that taint as it would have, with evidence of the power loss.
		must(t, fencer.FreezeAgent())
		must(t, m.PowerLoss())
		at := time.Now()
		_, err = taint.NewTainter(client, "cp-1", nil).Apply(ctx, victim, core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "cp-1", At: at, BootID: boot,
			Reason: "written by the test as the frozen fencer would have", BMC: &core.Reading{Power: "off", At: at, SentAt: at}})
		must(t, err)
		// Back on a new boot before Kubernetes noticed it was gone: its
		// Ready condition never changes.
		must(t, m.PowerOnViaBMC())
		poll.Until(t, podTimeout, victim+" reports a new boot", func() bool {
			n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
			return err == nil && n.Status.NodeInfo.BootID != boot
		})
		tBack := time.Now()
		must(t, fencer.RestartAgent())
		waitTaint(ctx, t, h, victim, false)
		t.Logf("taint removed %.1fs after the node reported its new boot (the fencer restarted then)", secs(time.Now(), tBack))
	})

	t.Run("a BMC that answers late: the evidence is dated with the answer", func(t *testing.T) {
		victim := "w-3"
		m := h.Machine(victim)
		m.BMCDown() // frozen: it will answer the fencer's read only when thawed
		t.Cleanup(m.BMCUp)
		t0 := time.Now()
		must(t, m.PowerLoss())
		// The fencer asks the BMC when gossip declares the node dead.
		poll.Until(t, podTimeout, "the fencer decides to read "+victim+"'s BMC", func() bool {
			for _, l := range strings.Split(fencer.AgentLog(), "\n") {
				if strings.Contains(l, "msg=decision component=fencer node="+victim+" ") && strings.Contains(l, "ReadPower") && lineAfter(l, t0) {
					return true
				}
			}
			return false
		})
		// The BMC stays frozen a while (the fault: a BMC that answers
		// late), then answers the request it holds.
		const freeze = 3 * time.Second
		time.Sleep(freeze)
		thawed := time.Now()
		m.BMCUp()
		n := waitTaint(ctx, t, h, victim, true)
		ev, ok, err := taint.EvidenceOf(n)
		// Dated with the answer, which the BMC gave after its thaw, not with
		// the request, sent while it was frozen: an order of events, not a
		// bet on how soon the fencer sent its request.
		if err != nil || !ok || ev.BMC == nil || ev.BMC.SentAt.IsZero() || !ev.BMC.SentAt.Before(thawed) || ev.BMC.At.Before(thawed) {
			t.Fatalf("evidence %+v (BMC %+v): want a request sent before the BMC was thawed (%s) and the answer's time, after it",
				ev, ev.BMC, thawed.Format(time.RFC3339Nano))
		}
		t.Logf("request sent %s, answered %s (%.1fs later): the evidence says %s", ev.BMC.SentAt.Format(time.RFC3339Nano),
			ev.BMC.At.Format(time.RFC3339Nano), ev.BMC.At.Sub(ev.BMC.SentAt).Seconds(), ev.Reason)
		must(t, m.PowerOnViaBMC())
		must(t, h.WaitNodeReady(ctx, victim, podTimeout))
		waitTaint(ctx, t, h, victim, false)
	})
}

// lineAfter reports whether a log line is stamped after t.
func lineAfter(line string, t time.Time) bool {
	at, ok := lineTime(line)
	return ok && at.After(t)
}

// lineTime is a log line's time stamp.
func lineTime(line string) (time.Time, bool) {
	stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
	at, err := time.Parse(time.RFC3339Nano, stamp)
	return at, err == nil
}

// taintAdded is when fenced's out-of-service taint was added to n (its
// TimeAdded, to the second), zero if n has none.
func taintAdded(n *corev1.Node) time.Time {
	for _, tn := range n.Spec.Taints {
		if tn.Key == taint.TaintKey && tn.TimeAdded != nil {
			return tn.TimeAdded.Time
		}
	}
	return time.Time{}
}
