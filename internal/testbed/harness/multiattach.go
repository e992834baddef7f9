package harness

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/internal/testbed/csi"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/diagnose"
	"fenced.io/fenced/pkg/vocab"
)

// The scenarios below reproduce, on the real control plane, every cause of
// a pod that cannot attach its volume: the "Multi-Attach error"
// Events come from kube-controller-manager's attach/detach controller, the
// attach errors from the test CSI driver's Attacher, the ReadWriteOncePod
// refusal from kube-scheduler. Each leaves one stuck pod and returns it as
// a Stuck, for a test to diagnose and then cure.

// Reasons and messages of the Events that show a stuck pod (the
// attach/detach controller's reason is vocab.EventFailedAttachVolume).
const (
	// ReasonFailedScheduling is kube-scheduler's, for a ReadWriteOncePod
	// claim in use.
	ReasonFailedScheduling = "FailedScheduling"
	// AttachFailed starts the message of a failed attach's Event.
	AttachFailed = "AttachVolume.Attach failed"
)

// StaleDetachError is the error the test driver reports for the stale
// VolumeAttachment of StaleAttachment, worded like a real driver's failed
// ControllerUnpublishVolume.
const StaleDetachError = "rpc error: code = Internal desc = ControllerUnpublishVolume: volume is still published (test driver)"

// scenarioTimeout bounds each wait of a scenario: NotReady alone takes the
// 50 s node-monitor grace period, pod GC's quarantine 40 s more, on a
// loaded machine.
const scenarioTimeout = 3 * time.Minute

// Stuck is a pod that cannot attach its volume (or, for ReadWriteOncePod,
// cannot be scheduled), as a scenario leaves it.
type Stuck struct {
	Namespace string
	// Pod is the stuck pod; Node the node it is scheduled on ("" when it
	// is not scheduled).
	Pod, Node string
	// PV and PVC are its volume and claim (PVC in Namespace).
	PV, PVC string
	// HeldBy is the node that holds the volume ("" when none does);
	// Holder the pod there that uses it ("" when none does);
	// VolumeAttachment the object that holds it ("" when none does).
	HeldBy, Holder, VolumeAttachment string
	// Event is the Event on the stuck pod that shows it.
	Event *corev1.Event
}

// String names the stuck pod and its Event, for test logs.
func (s Stuck) String() string {
	msg := ""
	if s.Event != nil {
		msg = s.Event.Type + " " + s.Event.Reason + " " + s.Event.Source.Component + ": " + s.Event.Message
	}
	return fmt.Sprintf("pod %s/%s on %q, volume %s held by %q (%s): %s", s.Namespace, s.Pod, s.Node, s.PV, s.HeldBy, s.VolumeAttachment, msg)
}

// StaleAttachment is seed 000: a pod moves off node holder (it is deleted
// and its replacement created on target at once, as an eviction or a
// rollout does), and the driver fails to detach the volume from holder
// (the test Attacher's FailDetach, with StaleDetachError). The volume is
// single-attach (Attacher.Exclusive), as a Mayastor nexus or a cloud disk
// is.
//
// What Kubernetes v1.34 does then: the attach/detach controller reports a
// Multi-Attach error on the new pod while holder's kubelet still lists the
// volume in volumesInUse (once, and only if it sees the new pod before the
// kubelet's unmount is reported); then it detaches by deleting holder's
// VolumeAttachment, the driver fails, and the controller marks the volume
// "uncertain" on holder — which its Multi-Attach check does not count — so
// it attaches the volume to target, which the driver refuses because
// holder still has it. The pod stays stuck with repeated FailedAttachVolume
// Events carrying the driver's AlreadyPublished error. Holder's
// VolumeAttachment is stale: being deleted, held by the driver's
// finalizer, status.detachError set, attached; holder Ready, no pod there
// uses the volume, its kubelet does not list it in volumesInUse.
// Deleting it again changes nothing; it goes when the driver detaches
// (Attacher.FailDetach(pv, holder, "")) or its finalizer is removed
// (RemoveAttacherFinalizer). Stuck.Event is the AlreadyPublished one.
func (h *Harness) StaleAttachment(ctx context.Context, ns, holder, target string) (Stuck, error) {
	s, err := h.newScenario(ctx, ns, corev1.ReadWriteOnce)
	if err != nil {
		return s, err
	}
	h.Attacher.Exclusive(s.PV)
	if err := h.runPodOn(ctx, ns, "app-old", holder, s.PVC, s.PV); err != nil {
		return s, err
	}
	s.HeldBy = holder
	if s.VolumeAttachment, err = h.attachmentOf(ctx, s.PV, holder); err != nil {
		return s, err
	}
	h.Attacher.FailDetach(s.PV, holder, StaleDetachError)
	if err := h.Cluster.Client().CoreV1().Pods(ns).Delete(ctx, "app-old", metav1.DeleteOptions{}); err != nil {
		return s, err
	}
	s.Pod, s.Node = "app-new", target
	if err := h.CreatePodOn(ctx, ns, s.Pod, target, s.PVC); err != nil {
		return s, err
	}
	if _, err := h.waitVA(ctx, s.PV, holder, "failing to detach", func(va *storagev1.VolumeAttachment) bool {
		return va.DeletionTimestamp != nil && va.Status.DetachError != nil && va.Status.Attached
	}); err != nil {
		return s, err
	}
	if err := h.waitNotInUse(ctx, holder, s.PV); err != nil {
		return s, err
	}
	s.Event, err = h.WaitEvent(ctx, ns, s.Pod, vocab.EventFailedAttachVolume, csi.AlreadyPublished+holder, scenarioTimeout)
	return s, err
}

// RemoveAttacherFinalizer removes the test driver's finalizer from the
// VolumeAttachment name, as an operator does with `kubectl patch
// volumeattachment NAME --type=json -p
// '[{"op":"remove","path":"/metadata/finalizers"}]'`: a VolumeAttachment
// that is being deleted then goes away.
func (h *Harness) RemoveAttacherFinalizer(ctx context.Context, name string) error {
	patch := `{"metadata":{"finalizers":null}}`
	_, err := h.Cluster.Client().StorageV1().VolumeAttachments().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// Deployment is a Deployment of CreateDeployment.
type Deployment struct {
	Namespace, Name string
	PV, PVC         string
}

// CreateDeployment creates a one-replica Deployment ns/name whose pod must
// run on node and mounts claim pvc, with the given strategy (the zero value
// is Kubernetes' default: RollingUpdate, 25% surge and unavailable, which
// for one replica means a new pod starts before the old one stops).
func (h *Harness) CreateDeployment(ctx context.Context, ns, name, pvc, node string, strategy appsv1.DeploymentStrategy) error {
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: strategy,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       podSpec(pvc, nodeAffinity(node, nil)),
			},
		},
	}
	_, err := h.Cluster.Client().AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	return err
}

// RollingUpdateRWO is seed 001: a Deployment with a ReadWriteOnce claim and
// the RollingUpdate strategy (maxSurge 1, maxUnavailable 0) runs on node
// from; an update moves its pod template to node to, the new pod starts
// there while the old one still runs, and gets a Multi-Attach error. The
// rollout is blocked: the old pod stays until the new one is Ready, which
// it never is. SetRecreate cures it.
func (h *Harness) RollingUpdateRWO(ctx context.Context, ns, from, to string) (Stuck, Deployment, error) {
	s, err := h.newScenario(ctx, ns, corev1.ReadWriteOnce)
	if err != nil {
		return s, Deployment{}, err
	}
	d := Deployment{Namespace: ns, Name: "logger", PV: s.PV, PVC: s.PVC}
	rolling := appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
		MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
	if err := h.CreateDeployment(ctx, ns, d.Name, s.PVC, from, rolling); err != nil {
		return s, d, err
	}
	old, err := h.WaitPodOn(ctx, ns, "app="+d.Name, from, "", scenarioTimeout)
	if err != nil {
		return s, d, err
	}
	if _, err := h.WaitPodRunning(ctx, ns, old.Name, from, scenarioTimeout); err != nil {
		return s, d, err
	}
	if err := h.WaitWriter(ctx, s.PV, from, 2, scenarioTimeout); err != nil {
		return s, d, err
	}
	// The update: a new template that lands on another node, retried on a
	// conflict: the Deployment controller writes the object too (its
	// revision annotation).
	deps := h.Cluster.Client().AppsV1().Deployments(ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dep, err := deps.Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		dep.Spec.Template.Spec.Affinity = nodeAffinity(to, nil)
		_, err = deps.Update(ctx, dep, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return s, d, err
	}
	s.HeldBy, s.Holder = from, old.Name
	if s.VolumeAttachment, err = h.attachmentOf(ctx, s.PV, from); err != nil {
		return s, d, err
	}
	s, err = h.stuckOn(ctx, s, to, "app="+d.Name, multiAttachMessage, diagnose.IsMultiAttach)
	return s, d, err
}

// SetRecreate switches Deployment ns/name to the Recreate strategy, the
// cure of seed 001: `kubectl patch deployment NAME -p
// '{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null}}}'`.
func (h *Harness) SetRecreate(ctx context.Context, ns, name string) error {
	patch := `{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null}}}`
	_, err := h.Cluster.Client().AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// DeadNode is seeds 002/003 without fencing: a StatefulSet's pod runs on
// victim, victim loses power and goes NotReady, and an operator
// force-deletes the pod (`kubectl delete pod --force`), as many runbooks
// say; the StatefulSet recreates it on spare, where it gets a Multi-Attach
// error: the dead node's VolumeAttachment stays, for its kubelet never
// reported the volume unmounted. The out-of-service taint on victim cures
// it (TaintOutOfService), as would the 6-minute force detach.
func (h *Harness) DeadNode(ctx context.Context, ns, victim, spare string) (Stuck, error) {
	sts, s, err := h.statefulSetDown(ctx, ns, victim, spare)
	if err != nil {
		return s, err
	}
	if err := h.WaitNodeNotReady(ctx, victim, scenarioTimeout); err != nil {
		return s, err
	}
	// The node lifecycle controller taints a NotReady node NoSchedule a
	// moment after its condition turns, not at once: a replacement created
	// before that can be scheduled back onto the dead node (a loaded CI
	// machine did), where it stays Pending instead of meeting the
	// Multi-Attach error on spare.
	if err := h.waitNoSchedule(ctx, victim, scenarioTimeout); err != nil {
		return s, err
	}
	pods := h.Cluster.Client().CoreV1().Pods(ns)
	if err := pods.Delete(ctx, sts.PodName(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return s, err
	}
	return h.stuckOn(ctx, s, spare, "app=db", multiAttachMessage, diagnose.IsMultiAttach)
}

// waitNoSchedule waits until node carries the node lifecycle controller's
// NoSchedule taint for a node that stopped reporting (unreachable) or is
// not ready.
func (h *Harness) waitNoSchedule(ctx context.Context, node string, timeout time.Duration) error {
	err := poll.UntilContext(ctx, 250*time.Millisecond, timeout, func(ctx context.Context) bool {
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule && (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady)
		})
	})
	if err != nil {
		return fmt.Errorf("node %s NotReady but not tainted NoSchedule (unreachable or not-ready) after %s", node, timeout)
	}
	return nil
}

// DeletedNode is a VolumeAttachment of a Node that no longer exists: a
// StatefulSet's pod runs on victim, victim loses power and its Node is
// deleted (`kubectl delete node`, as seed 002 suggests); pod GC deletes
// the orphaned pod after its 40 s quarantine, the StatefulSet recreates it
// on spare, and it gets a Multi-Attach error: the volume stays attached to
// the deleted node until the 6-minute force detach. Deleting the
// VolumeAttachment cures it.
func (h *Harness) DeletedNode(ctx context.Context, ns, victim, spare string) (Stuck, error) {
	_, s, err := h.statefulSetDown(ctx, ns, victim, spare)
	if err != nil {
		return s, err
	}
	if err := h.Cluster.Client().CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		return s, err
	}
	return h.stuckOn(ctx, s, spare, "app=db", multiAttachMessage, diagnose.IsMultiAttach)
}

// statefulSetDown creates StatefulSet "db" in ns on victim (spare allowed),
// waits until it writes, and cuts victim's power.
func (h *Harness) statefulSetDown(ctx context.Context, ns, victim, spare string) (StatefulSet, Stuck, error) {
	sts, err := h.CreateStatefulSet(ctx, ns, "db", victim, spare)
	s := Stuck{Namespace: ns, Pod: sts.PodName(), PV: sts.PV, PVC: sts.PVC, HeldBy: victim}
	if err != nil {
		return sts, s, err
	}
	if _, err := h.WaitPodRunning(ctx, ns, sts.PodName(), victim, scenarioTimeout); err != nil {
		return sts, s, err
	}
	if err := h.WaitWriter(ctx, sts.PV, victim, 2, scenarioTimeout); err != nil {
		return sts, s, err
	}
	if s.VolumeAttachment, err = h.attachmentOf(ctx, sts.PV, victim); err != nil {
		return sts, s, err
	}
	m := h.Machine(victim)
	if err := m.PowerLoss(); err != nil {
		return sts, s, err
	}
	return sts, s, m.WaitPower(ctx, "off", scenarioTimeout)
}

// SharedClaim is two workloads sharing one ReadWriteOnce claim: pod
// "app-a" runs on node a, pod "app-b" of another workload on node b gets a
// Multi-Attach error naming app-a. Stopping app-a (or giving app-b a claim
// of its own) cures it.
func (h *Harness) SharedClaim(ctx context.Context, ns, a, b string) (Stuck, error) {
	s, err := h.newScenario(ctx, ns, corev1.ReadWriteOnce)
	if err != nil {
		return s, err
	}
	if err := h.runPodOn(ctx, ns, "app-a", a, s.PVC, s.PV); err != nil {
		return s, err
	}
	s.HeldBy, s.Holder = a, "app-a"
	if s.VolumeAttachment, err = h.attachmentOf(ctx, s.PV, a); err != nil {
		return s, err
	}
	s.Pod = "app-b"
	return h.stuckOn(ctx, s, b, "", multiAttachMessage, diagnose.IsMultiAttach)
}

// AttachError is a volume the driver fails to attach: the test Attacher
// sets status.attachError to message on the VolumeAttachment of pod "app"
// on node, and the attach/detach controller's FailedAttachVolume Event
// carries it. Nothing else holds the volume (Stuck.HeldBy is ""; its
// VolumeAttachment is the failed one). Attacher.FailAttach(pv, node, "")
// cures it.
func (h *Harness) AttachError(ctx context.Context, ns, node, message string) (Stuck, error) {
	s, err := h.newScenario(ctx, ns, corev1.ReadWriteOnce)
	if err != nil {
		return s, err
	}
	h.Attacher.FailAttach(s.PV, node, message)
	if s, err = h.stuckOn(ctx, s, node, "", fmt.Sprintf("%q", message), containing(message)); err != nil {
		return s, err
	}
	va, err := h.waitVA(ctx, s.PV, node, "failed", func(va *storagev1.VolumeAttachment) bool { return va.Status.AttachError != nil })
	if err == nil {
		s.VolumeAttachment = va.Name
	}
	return s, err
}

// ReadWriteOncePod is a ReadWriteOncePod claim used by pod "app-a" on node
// a and wanted by pod "app-b", which must run on node b: kube-scheduler
// refuses to schedule app-b (a FailedScheduling Event; no VolumeAttachment
// is ever made for it, so the attach/detach controller says nothing).
// Deleting app-a cures it.
func (h *Harness) ReadWriteOncePod(ctx context.Context, ns, a, b string) (Stuck, error) {
	s, err := h.rwopInUse(ctx, ns, a)
	if err != nil {
		return s, err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.Pod, Namespace: ns},
		Spec: podSpec(s.PVC, nodeAffinity(b, nil))}
	if _, err := h.Cluster.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return s, err
	}
	s.Event, err = h.WaitEvent(ctx, ns, s.Pod, ReasonFailedScheduling, "ReadWriteOncePod", scenarioTimeout)
	return s, err
}

// ReadWriteOncePodBound is ReadWriteOncePod with app-b bound to node b by
// spec.nodeName, past the scheduler (as a static or hand-bound pod is):
// then the attach/detach controller, which counts ReadWriteOncePod as
// single-node, reports a Multi-Attach error naming app-a.
func (h *Harness) ReadWriteOncePodBound(ctx context.Context, ns, a, b string) (Stuck, error) {
	s, err := h.rwopInUse(ctx, ns, a)
	if err != nil {
		return s, err
	}
	return h.stuckOn(ctx, s, b, "", multiAttachMessage, diagnose.IsMultiAttach)
}

// rwopInUse creates a ReadWriteOncePod claim in ns and runs pod "app-a"
// with it on node a; Stuck.Pod is "app-b", not created yet.
func (h *Harness) rwopInUse(ctx context.Context, ns, a string) (Stuck, error) {
	s, err := h.newScenario(ctx, ns, corev1.ReadWriteOncePod)
	if err != nil {
		return s, err
	}
	if err := h.runPodOn(ctx, ns, "app-a", a, s.PVC, s.PV); err != nil {
		return s, err
	}
	s.Pod, s.HeldBy, s.Holder = "app-b", a, "app-a"
	s.VolumeAttachment, err = h.attachmentOf(ctx, s.PV, a)
	return s, err
}

// newScenario creates namespace ns and a volume of mode, claim "data".
func (h *Harness) newScenario(ctx context.Context, ns string, mode corev1.PersistentVolumeAccessMode) (Stuck, error) {
	s := Stuck{Namespace: ns, Pod: "app"}
	if _, err := h.Cluster.CreateNamespace(ctx, ns); err != nil {
		return s, err
	}
	var err error
	s.PV, s.PVC, err = csi.CreateVolume(ctx, h.Cluster.Client(), ns, "data", "1Gi", mode)
	return s, err
}

// stuckOn makes s.Pod stuck on node and waits for its FailedAttachVolume
// Event with a message that matches (what names it in the error). With
// selector "" s.Pod is created there as a bare pod; otherwise it is a
// controller's pod, the first matching selector that is scheduled on node.
func (h *Harness) stuckOn(ctx context.Context, s Stuck, node, selector, what string, match func(message string) bool) (Stuck, error) {
	s.Node = node
	if selector == "" {
		if err := h.CreatePodOn(ctx, s.Namespace, s.Pod, node, s.PVC); err != nil {
			return s, err
		}
	} else {
		p, err := h.WaitPodOn(ctx, s.Namespace, selector, node, "", scenarioTimeout)
		if err != nil {
			return s, err
		}
		s.Pod = p.Name
	}
	var err error
	s.Event, err = h.waitEvent(ctx, s.Namespace, s.Pod, vocab.EventFailedAttachVolume, what, match, scenarioTimeout)
	return s, err
}

// WaitPodOn waits until a pod of ns matching the label selector ("" any)
// other than the one named except is scheduled on node, and returns it.
func (h *Harness) WaitPodOn(ctx context.Context, ns, selector, node, except string, timeout time.Duration) (*corev1.Pod, error) {
	var found *corev1.Pod
	err := poll.UntilContext(ctx, 200*time.Millisecond, timeout, func(ctx context.Context) bool {
		list, err := h.Cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false
		}
		for i, p := range list.Items {
			if p.Spec.NodeName == node && p.Name != except && p.DeletionTimestamp == nil {
				found = &list.Items[i]
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("no pod %q in %s on %s after %s; pods: %s", selector, ns, node, timeout, h.describePods(ctx, ns))
	}
	return found, nil
}

// describePods names the pods of ns with their nodes and phases, for
// error messages.
func (h *Harness) describePods(ctx context.Context, ns string) string {
	list, err := h.Cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for i := range list.Items {
		out = append(out, list.Items[i].Name+" "+describePod(&list.Items[i]))
	}
	return strings.Join(out, "; ")
}

// runPodOn creates bare pod ns/name on node with claim pvc and waits until
// it runs and writes to pv.
func (h *Harness) runPodOn(ctx context.Context, ns, name, node, pvc, pv string) error {
	if err := h.CreatePodOn(ctx, ns, name, node, pvc); err != nil {
		return err
	}
	if _, err := h.WaitPodRunning(ctx, ns, name, node, scenarioTimeout); err != nil {
		return err
	}
	return h.WaitWriter(ctx, pv, node, 2, scenarioTimeout)
}

// attachmentOf returns the name of pv's VolumeAttachment to node, waiting
// until it is attached.
func (h *Harness) attachmentOf(ctx context.Context, pv, node string) (string, error) {
	va, err := h.waitVA(ctx, pv, node, "attached", func(va *storagev1.VolumeAttachment) bool { return va.Status.Attached })
	if err != nil {
		return "", err
	}
	return va.Name, nil
}

// waitVA waits until pv's VolumeAttachment to node satisfies cond.
func (h *Harness) waitVA(ctx context.Context, pv, node, what string, cond func(*storagev1.VolumeAttachment) bool) (*storagev1.VolumeAttachment, error) {
	var found *storagev1.VolumeAttachment
	err := poll.UntilContext(ctx, 200*time.Millisecond, scenarioTimeout, func(ctx context.Context) bool {
		vas, err := h.VolumeAttachments(ctx, pv)
		if err != nil {
			return false
		}
		for i, va := range vas {
			if va.Spec.NodeName == node && cond(&va) {
				found = &vas[i]
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("no VolumeAttachment of %s to %s %s after %s", pv, node, what, scenarioTimeout)
	}
	return found, nil
}

// waitNotInUse waits until node's kubelet no longer lists pv in
// status.volumesInUse.
func (h *Harness) waitNotInUse(ctx context.Context, node, pv string) error {
	unique := corev1.UniqueVolumeName("kubernetes.io/csi/" + csi.DriverName + "^" + pv)
	err := poll.UntilContext(ctx, 500*time.Millisecond, scenarioTimeout, func(ctx context.Context) bool {
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && !slices.Contains(n.Status.VolumesInUse, unique)
	})
	if err != nil {
		return fmt.Errorf("node %s still lists %s in volumesInUse after %s", node, unique, scenarioTimeout)
	}
	return nil
}

// podSpec is a one-container pod spec mounting claim pvc at /data.
func podSpec(pvc string, affinity *corev1.Affinity) corev1.PodSpec {
	return corev1.PodSpec{
		Affinity:   affinity,
		Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/data"}}}},
		Volumes:    []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc}}}},
	}
}

// Kubectl runs the harness's own kubectl (the pinned build next to the
// control plane's binaries) as cluster admin and returns its combined
// output: what an operator sees.
func (h *Harness) Kubectl(ctx context.Context, args ...string) (string, error) {
	argv := append([]string{"--kubeconfig=" + h.Cluster.Kubeconfig}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(h.Cluster.BinDir, "kubectl"), argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Fenced runs the fenced CLI (built once per test binary) as cluster
// admin, the way an operator would run it, and returns its stdout, its
// stderr and its exit code. err is set only when it could not run.
func (h *Harness) Fenced(ctx context.Context, args ...string) (stdout, stderr string, code int, err error) {
	bin, err := CurrentFenced()
	if err != nil {
		return "", "", -1, err
	}
	cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig="+h.Cluster.Kubeconfig)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode(), nil
	case err != nil:
		return out.String(), errOut.String(), -1, err
	}
	return out.String(), errOut.String(), 0, nil
}
