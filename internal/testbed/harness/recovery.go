package harness

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
)

// Records counts the records node's writers put on pv's disk.
func (h *Harness) Records(pv, node string) int {
	r, err := h.CheckVolume(pv)
	if err != nil {
		return 0
	}
	n := 0
	for _, w := range r.Writers {
		if w.Node == node {
			n += w.Count
		}
	}
	return n
}

// WaitWriter waits until node has written at least n records to pv.
func (h *Harness) WaitWriter(ctx context.Context, pv, node string, n int, timeout time.Duration) error {
	err := poll.UntilContext(ctx, 100*time.Millisecond, timeout, func(context.Context) bool {
		return h.Records(pv, node) >= n
	})
	if err != nil {
		return fmt.Errorf("%s wrote %d records to %s after %s, want %d", node, h.Records(pv, node), pv, timeout, n)
	}
	return nil
}

// Recovery is the timeline of one power loss, each step measured from the
// moment the plug was pulled. A zero duration means "did not happen".
type Recovery struct {
	Detected       time.Duration // fenced's NodeSuspected Event
	PowerOff       time.Duration // the power reading that became evidence; with watchdog evidence, the fence order seen
	Tainted        time.Duration // out-of-service taint on the Node
	VolumeReleased time.Duration // the victim's VolumeAttachment deleted
	PodRunning     time.Duration // the replacement pod Running on spare
	PoweredOn      time.Duration // switched back on (BMC, or feeds restored)
	NodeBack       time.Duration // after power on: Node Ready again
	TaintRemoved   time.Duration // after power on: fenced's taint gone
	Evidence       *core.Evidence
}

// Recovered reports whether the volume was released and the pod runs elsewhere.
func (r Recovery) Recovered() bool { return r.VolumeReleased > 0 && r.PodRunning > 0 }

// PowerLossRecovery pulls victim's plug and watches the API every 50 ms
// until sts's volume is released and its pod runs on spare, or limit.
// The BMC stays up and reads off.
func (h *Harness) PowerLossRecovery(ctx context.Context, sts StatefulSet, oldPodUID, victim, spare string, limit time.Duration) (Recovery, time.Time, error) {
	return h.recoveryAfter(ctx, sts, oldPodUID, victim, spare, limit, h.Machine(victim).PowerLoss)
}

// FeedLossRecovery is PowerLossRecovery with every power feed of victim
// cut instead (Options.Feeds): its BMC goes dark with it, so only a PDU
// level of the fencing topology can give evidence. PowerOff is then when
// that level's oldest plug answered off.
func (h *Harness) FeedLossRecovery(ctx context.Context, sts StatefulSet, oldPodUID, victim, spare string, limit time.Duration) (Recovery, time.Time, error) {
	return h.recoveryAfter(ctx, sts, oldPodUID, victim, spare, limit, h.Machine(victim).CutFeeds)
}

// recoveryAfter runs cut and measures the recovery from it.
func (h *Harness) recoveryAfter(ctx context.Context, sts StatefulSet, oldPodUID, victim, spare string, limit time.Duration, cut func() error) (Recovery, time.Time, error) {
	var r Recovery
	t0 := time.Now()
	if err := cut(); err != nil {
		return r, t0, err
	}
	client := h.Cluster.Client()
	since := func() time.Duration { return time.Since(t0).Round(10 * time.Millisecond) }
	for time.Since(t0) < limit && !r.Recovered() {
		if r.Detected == 0 {
			evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + victim + ",reason=NodeSuspected"})
			if err == nil && len(evs.Items) > 0 && evs.Items[len(evs.Items)-1].LastTimestamp.After(t0.Add(-time.Second)) {
				r.Detected = since()
			}
		}
		if r.Tainted == 0 {
			if n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{}); err == nil && taint.HasTaint(n) {
				r.Tainted = since()
				if ev, ok, _ := taint.EvidenceOf(n); ok {
					r.Evidence = &ev
					switch {
					case ev.BMC != nil:
						r.PowerOff = ev.BMC.At.Sub(t0).Round(10 * time.Millisecond)
					case ev.Watchdog != nil:
						r.PowerOff = ev.Watchdog.OrderSeenAt.Sub(t0).Round(10 * time.Millisecond)
					}
				}
			}
		}
		if r.VolumeReleased == 0 {
			if vas, err := h.VolumeAttachments(ctx, sts.PV); err == nil {
				attached := false
				for _, va := range vas {
					attached = attached || va.Spec.NodeName == victim
				}
				if !attached {
					r.VolumeReleased = since()
				}
			}
		}
		if r.PodRunning == 0 {
			if p, err := client.CoreV1().Pods(sts.Namespace).Get(ctx, sts.PodName(), metav1.GetOptions{}); err == nil &&
				string(p.UID) != oldPodUID && p.Spec.NodeName == spare && p.Status.Phase == "Running" {
				r.PodRunning = since()
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r, t0, nil
}

// PowerOnRecovery switches victim on through its BMC and records when its
// Node is Ready again and when fenced's taint is gone (measured from t0).
func (h *Harness) PowerOnRecovery(ctx context.Context, r *Recovery, victim string, t0 time.Time, timeout time.Duration) error {
	return h.recoverWith(ctx, r, victim, t0, timeout, h.Machine(victim).PowerOnViaBMC)
}

// FeedsBackRecovery switches victim's outlets on again — its BMC answers,
// then "restore last state" switches the machine on — and records the
// same as PowerOnRecovery.
func (h *Harness) FeedsBackRecovery(ctx context.Context, r *Recovery, victim string, t0 time.Time, timeout time.Duration) error {
	return h.recoverWith(ctx, r, victim, t0, timeout, h.Machine(victim).RestoreFeeds)
}

func (h *Harness) recoverWith(ctx context.Context, r *Recovery, victim string, t0 time.Time, timeout time.Duration, on func() error) error {
	if err := on(); err != nil {
		return err
	}
	r.PoweredOn = time.Since(t0).Round(10 * time.Millisecond)
	if err := h.WaitNodeReady(ctx, victim, timeout); err != nil {
		return err
	}
	r.NodeBack = time.Since(t0).Round(10 * time.Millisecond)
	err := poll.UntilContext(ctx, 50*time.Millisecond, timeout, func(ctx context.Context) bool {
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		return err == nil && !taint.HasTaint(n)
	})
	if err != nil {
		return fmt.Errorf("node %s still tainted %s after it came back", victim, timeout)
	}
	r.TaintRemoved = time.Since(t0).Round(10 * time.Millisecond)
	return nil
}
