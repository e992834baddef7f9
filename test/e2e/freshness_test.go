package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestEvidenceFreshness: evidence must be true when the taint lands.
// The API server goes away across a power loss; a fencer dies
// between its taint and the rest of the fence. The scenarios run one after
// the other: an API outage is felt by every node.
func TestEvidenceFreshness(t *testing.T) {
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3"},
		// A BMC request may wait 5 s for its answer (a slow BMC below).
		Fencing: &harness.Fencing{Fencers: []string{"cp-1"}, BMCTimeout: 5 * time.Second},
	})
	fencer := h.Machine("cp-1")
	client := h.Cluster.Client()
	// The workload of the second scenario starts before any outage.
	sts, oldPodUID := startWorkload(ctx, t, h, "fresh-off", "w-2", "w-3")

	// waitPowerOffRead waits for the fencer's BMC reading of off for node
	// (taken while the API server is away, so it cannot be written).
	waitPowerOffRead := func(t *testing.T, node string, since time.Time) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			for _, l := range bmcRequestsFor(fencer, node, since) {
				if strings.Contains(l, "power=off") {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("the fencer never read %s's BMC as off:\n%s", node, strings.Join(bmcRequestsFor(fencer, node, since), "\n"))
		}
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
		waitPowerOffRead(t, victim, t0)
		tRead := time.Now()
		must(t, m.PowerOnViaBMC()) // back on its new boot while the API is still away
		time.Sleep(15 * time.Second)
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
		ev, err := h.WaitEvent(ctx, "default", victim, vocab.EventFenceEvidenceVoided, "", 30*time.Second)
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
		waitPowerOffRead(t, victim, t0)
		tRead := time.Now()
		time.Sleep(12 * time.Second) // the reading is now older than the 10 s it may be
		tStart := time.Now()
		must(t, h.Cluster.StartAPIServer(ctx))
		tAPI := time.Now()
		n := waitTaint(ctx, t, h, victim, true)
		tTaint := time.Now()
		ev, ok, err := taint.EvidenceOf(n)
		// Not the first reading, which got too old during the outage: one
		// at most 10 s old when the taint was written.
		if err != nil || !ok || ev.Method != vocab.EvidenceBMCPowerOff || ev.BMC == nil || ev.BMC.At.Before(tRead.Add(9*time.Second)) ||
			tTaint.Sub(ev.BMC.At) > 11*time.Second {
			t.Fatalf("evidence %+v (reading %+v): want a reading read again after the first one (%s) and at most 10 s old when written (%s)",
				ev, ev.BMC, tRead.Format(time.RFC3339Nano), tTaint.Format(time.RFC3339Nano))
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
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			c := taint.ReadyCondition(n)
			return c != nil && (c.Status == corev1.ConditionFalse && c.Reason == taint.ReasonPoweredOff || c.Status == corev1.ConditionUnknown), nil
		})
		must(t, err)
		tPoweredOff := time.Now()
		podGone, vaGone, running := requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
		requireSafe(t, h, sts.PV)
		t.Logf("timeline (API server started at 0, ready at %.1fs): reading used %.1fs, tainted %.1fs, not Ready %.1fs, pod gone %.1fs, volume released %.1fs, pod Running on %s %.1fs",
			secs(tAPI, tStart), secs(ev.BMC.At, tStart), secs(tTaint, tStart), secs(tPoweredOff, tStart), secs(podGone, tStart), secs(vaGone, tStart), spare, secs(running, tStart))
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
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
			return err == nil && n.Status.NodeInfo.BootID != boot, nil
		})
		must(t, err)
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
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			for _, l := range strings.Split(fencer.AgentLog(), "\n") {
				if strings.Contains(l, "msg=decision component=fencer node="+victim+" ") && strings.Contains(l, "ReadPower") && lineAfter(l, t0) {
					return true, nil
				}
			}
			return false, nil
		})
		must(t, err)
		const freeze = 3 * time.Second
		time.Sleep(freeze)
		m.BMCUp()
		n := waitTaint(ctx, t, h, victim, true)
		ev, ok, err := taint.EvidenceOf(n)
		if err != nil || !ok || ev.BMC == nil || ev.BMC.SentAt.IsZero() || ev.BMC.At.Sub(ev.BMC.SentAt) < freeze-500*time.Millisecond {
			t.Fatalf("evidence %+v (BMC %+v): want the answer's time, about %s after the request", ev, ev.BMC, freeze)
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
	stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
	at, err := time.Parse(time.RFC3339Nano, stamp)
	return err == nil && at.After(t)
}
