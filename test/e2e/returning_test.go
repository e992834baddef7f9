package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/csi"
	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/internal/testbed/watchgate"
	"fenced.io/fenced/pkg/taint"
)

// nodes is the collection the controller-manager's Node informer lists
// and watches; the gate holds it back.
const nodes = "/api/v1/nodes"

// TestTaintRemovalRace reproduces the upstream race on the way back from a
// fence, and shows that fenced's removal leaves it no window.
//
// The attach/detach controller decides whether to detach a volume without
// first checking that it is unmounted from the out-of-service taint as its
// informer's copy of the Node shows it. When that copy lags — here the
// gate (internal/testbed/watchgate) holds back the controller-manager's
// Node watch, while its Pod and VolumeAttachment watches go on — a taint
// removed from a node that runs again is still there for it.
//
// A SIGSTOP of the controller-manager around the removal does not show the
// hazard: every informer of the process stands still together, so the pod
// that lands on the node while it is stopped is as unknown to it as the
// removal (no attach, nothing to detach), and once thawed it reads the
// removal, which comes first in its Node watch, long before that pod can
// be attached, mounted and stopped. What it takes is one informer behind
// the others, and the gate does that.
//
// The controller-manager runs without its taint eviction controller, which
// reads the same lagging copy and would evict the pod as soon as it lands
// (graceful, so no second writer by itself): left in, it would make the
// pod leave before its volume is mounted, and hide the force-detach, the
// hazard to the data.
//
//   - naive: the out-of-service taint removed in one write (as fenced did
//     before, and as the Kubernetes documentation tells operators to). A pod
//     with the RWO volume lands on the node, runs, and is deleted while its
//     volume stays mounted (a busy unmount): the attach/detach controller
//     force-detaches it under the mounted, written volume, the volume
//     attaches to the pod's replacement elsewhere, and the data-safety
//     checker finds two writers.
//   - fenced: the same with fenced's sequence. The pod cannot land while
//     the controller-manager lags (fenced's returning taint, the node
//     cordoned); fenced lifts both only after the node lifecycle
//     controller answered the cordon. Then the pod lands, and the same
//     lag and the same busy unmount leave the volume attached: the
//     replacement waits with a Multi-Attach error until the unmount, and
//     the volume never has two writers.
func TestTaintRemovalRace(t *testing.T) {
	harness.Parallel(t)
	gate := watchgate.New()
	t.Cleanup(gate.Close)
	controllers := slices.DeleteFunc(slices.Clone(cluster.DefaultControllers), func(c string) bool { return c == "taint-eviction-controller" })
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}},
		Cluster:  cluster.Options{Controllers: controllers, ControllerManagerVia: gate.Serve},
	})

	t.Run("naive removal: the volume of a live pod is force-detached", func(t *testing.T) {
		r := newReturn(ctx, t, h, "naive", "w-1", "w-3")
		t.Cleanup(func() { gate.Release(nodes) }) // a failure must not leave the next subtest blind
		r.fencedAndBack()
		gate.Hold(nodes)
		r.removeNaively()
		must(t, r.m.HoldMounts())
		t.Cleanup(func() { _ = r.m.ReleaseMounts() })
		r.runPod()
		detached := r.stopPod(true)
		// The old writer goes on after the detach: the volume was mounted.
		before := h.Records(r.pv, r.victim)
		must(t, h.WaitWriter(ctx, r.pv, r.victim, before+3, podTimeout))
		t.Logf("%s: VolumeAttachment deleted %.1fs after the pod's deletion, with the volume mounted and written", r.victim, detached.Seconds())
		if log, err := os.ReadFile(h.Cluster.LogPath(cluster.ControllerManager)); err == nil &&
			!strings.Contains(string(log), "node has out-of-service taint, force detaching") {
			t.Errorf("the controller-manager's log does not say it force-detached on the out-of-service taint")
		}
		r.replace(false)
		report, err := h.CheckVolume(r.pv)
		must(t, err)
		if report.Err() == nil {
			t.Fatalf("no two writers on %s after the force-detach; writers %+v", r.pv, report.Writers)
		}
		t.Logf("the hazard, reproduced: %v", report.Err())
		gate.Release(nodes)
		must(t, r.m.ReleaseMounts())
	})

	t.Run("fenced's removal: never force-detached", func(t *testing.T) {
		r := newReturn(ctx, t, h, "fenced", "w-2", "w-3")
		t.Cleanup(func() { gate.Release(nodes) })
		r.fencedAndBack()
		gate.Hold(nodes)
		setPause(ctx, t, h, false)
		swapped := r.waitSwap()
		// The controller-manager does not see the cordon: the returning
		// taint stays, and the pod cannot land.
		r.createPod()
		ev, err := h.WaitEvent(ctx, r.ns, "app", "FailedScheduling", "", podTimeout)
		must(t, err)
		t.Logf("while the controller-manager lags: %s", ev.Message)
		r.requireReturning()
		waitMetric(t, h.Machine("cp-1"), `fenced_node_state{node="`+r.victim+`",state="Returning"} 1`, podTimeout)
		r.requireKubeletRefuses()
		// As long as we look, nothing changes while the lag lasts: 2 s is
		// dozens of the node lifecycle controller's answers when it sees.
		for since := time.Now(); time.Since(since) < 2*time.Second; time.Sleep(100 * time.Millisecond) {
			r.requireReturning()
		}

		released := time.Now()
		gate.Release(nodes)
		lifted := r.waitLift()
		t.Logf("%s: returning taint lifted %.2fs after the controller-manager's Node watch was released (held %.1fs since the swap)",
			r.victim, secs(lifted, released), secs(released, swapped))
		_, err = h.WaitEvent(ctx, "default", r.victim, "NodeRecovered", "", podTimeout)
		must(t, err)
		r.waitPod()

		// The same lag again, now that the controller-manager has seen the
		// removal, and the same busy unmount: the volume stays attached.
		gate.Hold(nodes)
		must(t, r.m.HoldMounts())
		t.Cleanup(func() { _ = r.m.ReleaseMounts() })
		r.stopPod(false)
		r.createReplacement()
		_, err = h.WaitMultiAttach(ctx, r.ns, "app-2", podTimeout)
		must(t, err)
		if !r.attached() {
			t.Fatalf("the volume of %s was detached with its pod's volume still mounted", r.victim)
		}
		before := h.Records(r.pv, r.victim)
		must(t, h.WaitWriter(ctx, r.pv, r.victim, before+3, podTimeout))
		if !r.attached() {
			t.Fatalf("the volume of %s was detached with its pod's volume still mounted", r.victim)
		}
		requireSafe(t, h, r.pv)

		// The unmount goes through: the volume moves, one writer at a time.
		gate.Release(nodes)
		must(t, r.m.ReleaseMounts())
		r.replace(true)
		requireSafe(t, h, r.pv)
	})
}

// aReturn is one node's way back, with a volume of its own in namespace ns.
type aReturn struct {
	ctx           context.Context
	t             *testing.T
	h             *harness.Harness
	ns, pv, pvc   string
	victim, spare string
	m             *harness.Machine
}

func newReturn(ctx context.Context, t *testing.T, h *harness.Harness, ns, victim, spare string) *aReturn {
	t.Helper()
	_, err := h.Cluster.CreateNamespace(ctx, ns)
	must(t, err)
	pv, pvc, err := csi.CreateVolume(ctx, h.Cluster.Client(), ns, "data", "1Gi", corev1.ReadWriteOnce)
	must(t, err)
	return &aReturn{ctx: ctx, t: t, h: h, ns: ns, pv: pv, pvc: pvc, victim: victim, spare: spare, m: h.Machine(victim)}
}

// fencedAndBack loses the victim's power, waits for fenced's taint, pauses
// fencing (so that the removal waits for the test), switches the victim on
// again and waits until it is Ready and the node lifecycle controller has
// taken its own taints off: the scheduler would place a pod there but for
// the out-of-service taint, and the controller-manager's view of the Node
// is the Ready one.
func (r *aReturn) fencedAndBack() {
	t, h := r.t, r.h
	t.Helper()
	must(t, r.m.PowerLoss())
	waitTaint(r.ctx, t, h, r.victim, true)
	setPause(r.ctx, t, h, true)
	t.Cleanup(func() { setPause(context.Background(), t, h, false) })
	must(t, r.m.PowerOnViaBMC())
	must(t, h.WaitNodeReady(r.ctx, r.victim, podTimeout))
	poll.Until(t, podTimeout, r.victim+" has no taint but the out-of-service taint", func() bool {
		n := r.node()
		for _, tn := range n.Spec.Taints {
			if tn.Key != taint.TaintKey {
				return false
			}
		}
		return taint.HasTaint(n)
	})
}

func (r *aReturn) node() *corev1.Node {
	n, err := r.h.Cluster.Client().CoreV1().Nodes().Get(r.ctx, r.victim, metav1.GetOptions{})
	must(r.t, err)
	return n
}

// removeNaively removes the out-of-service taint and fenced's annotations
// in one write, as fenced's Remove did before its returning taint.
func (r *aReturn) removeNaively() {
	nodes := r.h.Cluster.Client().CoreV1().Nodes()
	must(r.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(r.ctx, r.victim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == taint.TaintKey })
		delete(n.Annotations, taint.AnnotationAppliedBy)
		delete(n.Annotations, taint.AnnotationEvidence)
		_, err = nodes.Update(r.ctx, n, metav1.UpdateOptions{})
		return err
	}))
}

// waitSwap waits for fenced's swap: the out-of-service taint off, the
// returning taint on, the node cordoned.
func (r *aReturn) waitSwap() time.Time {
	poll.Until(r.t, podTimeout, "fenced swaps the taint of "+r.victim, func() bool {
		n := r.node()
		return !taint.HasTaint(n) && taint.HasReturningTaint(n) && n.Spec.Unschedulable
	})
	return time.Now()
}

// requireReturning fails unless the victim still carries the returning
// taint, cordoned, without the node lifecycle controller's answer.
func (r *aReturn) requireReturning() {
	r.t.Helper()
	n := r.node()
	if !taint.HasReturningTaint(n) || taint.CordonOf(n).Taint || !n.Spec.Unschedulable {
		r.t.Fatalf("%s while the controller-manager lags: taints %+v, unschedulable %v", r.victim, n.Spec.Taints, n.Spec.Unschedulable)
	}
}

// requireKubeletRefuses binds a pod to the returning node directly, past
// the scheduler and its cordon: its kubelet refuses it, the returning
// taint being NoExecute.
func (r *aReturn) requireKubeletRefuses() {
	r.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bound", Namespace: r.ns},
		Spec: corev1.PodSpec{NodeName: r.victim, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1"}}}}
	_, err := r.h.Cluster.Client().CoreV1().Pods(r.ns).Create(r.ctx, pod, metav1.CreateOptions{})
	must(r.t, err)
	var p *corev1.Pod
	poll.Until(r.t, podTimeout, "the kubelet of "+r.victim+" refuses a pod bound to it", func() bool {
		p, err = r.h.Cluster.Client().CoreV1().Pods(r.ns).Get(r.ctx, "bound", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed
	})
	r.t.Logf("a pod bound to %s by spec.nodeName: %s %s", r.victim, p.Status.Reason, p.Status.Message)
}

// waitLift waits until fenced lifted the returning taint and its cordon.
func (r *aReturn) waitLift() time.Time {
	poll.Until(r.t, podTimeout, "fenced lifts the returning taint of "+r.victim, func() bool {
		n := r.node()
		return !taint.HasReturningTaint(n) && !n.Spec.Unschedulable
	})
	return time.Now()
}

// createPod creates pod "app" with the claim, required on the victim by
// node affinity: the scheduler places it (spec.nodeName would bypass it).
func (r *aReturn) createPod() { r.createPodOn("app", r.victim) }

// createReplacement creates pod "app-2" with the same claim on the spare.
func (r *aReturn) createReplacement() { r.createPodOn("app-2", r.spare) }

func (r *aReturn) createPodOn(name, node string) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.ns},
		Spec: corev1.PodSpec{
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
				}}},
			}},
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/data"}}}},
			Volumes:    []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: r.pvc}}}},
		},
	}
	_, err := r.h.Cluster.Client().CoreV1().Pods(r.ns).Create(r.ctx, pod, metav1.CreateOptions{})
	must(r.t, err)
}

// runPod creates pod "app" and waits until it writes on the victim.
func (r *aReturn) runPod() {
	r.createPod()
	r.waitPod()
}

// waitPod waits until pod "app" runs on the victim and writes.
func (r *aReturn) waitPod() {
	_, err := r.h.WaitPodRunning(r.ctx, r.ns, "app", r.victim, podTimeout)
	must(r.t, err)
	must(r.t, r.h.WaitWriter(r.ctx, r.pv, r.victim, 3, podTimeout))
}

// stopPod deletes pod "app" (its volume's unmount is held: it stays
// mounted, its writer writing) and waits until its containers have
// stopped. With detached, it then waits until the volume's
// VolumeAttachment to the victim is gone while the pod is still there,
// and returns how long after the deletion that was.
func (r *aReturn) stopPod(detached bool) time.Duration {
	t, pods := r.t, r.h.Cluster.Client().CoreV1().Pods(r.ns)
	t.Helper()
	must(t, pods.Delete(r.ctx, "app", metav1.DeleteOptions{}))
	deleted := time.Now()
	poll.Until(t, podTimeout, "the containers of the deleted pod stop", func() bool {
		p, err := pods.Get(r.ctx, "app", metav1.GetOptions{})
		if err != nil {
			return apierrors.IsNotFound(err)
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Terminated == nil {
				return false
			}
		}
		return true
	})
	if !detached {
		return 0
	}
	poll.Until(t, podTimeout, "the volume's VolumeAttachment to "+r.victim+" is gone", func() bool { return !r.attached() })
	took := time.Since(deleted)
	if _, err := pods.Get(r.ctx, "app", metav1.GetOptions{}); err != nil {
		t.Fatalf("the pod is gone (%v): its volume was unmounted after all", err)
	}
	return took
}

// attached reports whether the volume has a VolumeAttachment to the victim.
func (r *aReturn) attached() bool {
	vas, err := r.h.VolumeAttachments(r.ctx, r.pv)
	must(r.t, err)
	for _, va := range vas {
		if va.Spec.NodeName == r.victim {
			return true
		}
	}
	return false
}

// replace waits until the replacement "app-2" (created here unless
// created already) runs on the spare and writes.
func (r *aReturn) replace(created bool) {
	if !created {
		r.createReplacement()
	}
	_, err := r.h.WaitPodRunning(r.ctx, r.ns, "app-2", r.spare, podTimeout)
	must(r.t, err)
	must(r.t, r.h.WaitWriter(r.ctx, r.pv, r.spare, 3, podTimeout))
}

// setPause switches the cluster-wide pause of fencing on or off.
func setPause(ctx context.Context, t *testing.T, h *harness.Harness, on bool) {
	t.Helper()
	value := map[bool]string{true: "true", false: "false"}[on]
	cms := h.Cluster.Client().CoreV1().ConfigMaps(harness.LeaseNamespace)
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, taint.PauseConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: taint.PauseConfigMap},
				Data: map[string]string{taint.PauseKey: value, taint.PauseReasonKey: "e2e: the test removes the taint"}}
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[taint.PauseKey] = value
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	}))
	waitMetric(t, h.Machine("cp-1"), "fenced_paused "+map[bool]string{true: "1", false: "0"}[on], time.Minute)
}
