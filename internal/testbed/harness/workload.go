package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/internal/testbed/csi"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/diagnose"
	"fenced.io/fenced/pkg/vocab"
)

// OutOfServiceTaint is Kubernetes' non-graceful node shutdown taint.
var OutOfServiceTaint = corev1.Taint{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}

// StatefulSet is a one-replica StatefulSet with one RWO volume.
type StatefulSet struct {
	Namespace, Name string
	PV, PVC         string
}

// PodName is the name of the StatefulSet's only pod.
func (s StatefulSet) PodName() string { return s.Name + "-0" }

// CreateStatefulSet creates namespace ns and a one-replica StatefulSet whose
// pod prefers node first but may run on any of nodes, with a pre-bound RWO
// volume of the test CSI driver.
func (h *Harness) CreateStatefulSet(ctx context.Context, ns, name, first string, nodes ...string) (StatefulSet, error) {
	if _, err := h.Cluster.CreateNamespace(ctx, ns); err != nil {
		return StatefulSet{}, err
	}
	const claim = "data"
	pvs, pvcs, err := csi.PreBindForStatefulSet(ctx, h.Cluster.Client(), ns, claim, name, 1)
	if err != nil {
		return StatefulSet{}, err
	}
	labels := map[string]string{"app": name}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Affinity:   nodeAffinity(first, nodes),
					Containers: []corev1.Container{{Name: "db", Image: "registry.invalid/db:1", VolumeMounts: []corev1.VolumeMount{{Name: claim, MountPath: "/data"}}}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: claim},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr.To(csi.StorageClassName),
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
	if _, err := h.Cluster.Client().AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return StatefulSet{}, err
	}
	return StatefulSet{Namespace: ns, Name: name, PV: pvs[0], PVC: pvcs[0]}, nil
}

// nodeAffinity requires one of nodes and prefers first, so the scheduler
// places the pod on first while it can and elsewhere when it cannot.
func nodeAffinity(first string, nodes []string) *corev1.Affinity {
	all := append([]string{first}, nodes...)
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: all}},
		}}},
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{first}},
			}},
		}},
	}}
}

// CreatePodOn creates a bare pod bound to node that mounts pvc.
func (h *Harness) CreatePodOn(ctx context.Context, ns, name, node, pvc string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/data"}}}},
			Volumes:    []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc}}}},
		},
	}
	_, err := h.Cluster.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// WaitPodRunning waits until pod ns/name is Running on node ("" = any) and
// returns it. A pod that is being deleted does not count.
func (h *Harness) WaitPodRunning(ctx context.Context, ns, name, node string, timeout time.Duration) (*corev1.Pod, error) {
	return h.waitPod(ctx, ns, name, node, false, timeout)
}

// WaitPodReady is WaitPodRunning that also waits for the Ready condition:
// on a real kubelet, the pod's readiness probe passing.
func (h *Harness) WaitPodReady(ctx context.Context, ns, name, node string, timeout time.Duration) (*corev1.Pod, error) {
	return h.waitPod(ctx, ns, name, node, true, timeout)
}

func (h *Harness) waitPod(ctx context.Context, ns, name, node string, ready bool, timeout time.Duration) (*corev1.Pod, error) {
	var last *corev1.Pod
	err := poll.UntilContext(ctx, 200*time.Millisecond, timeout, func(ctx context.Context) bool {
		p, err := h.Cluster.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		last = p
		return p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && (node == "" || p.Spec.NodeName == node) &&
			(!ready || podReady(p))
	})
	if err != nil {
		want := "Running"
		if ready {
			want = "Running and Ready"
		}
		return nil, fmt.Errorf("pod %s/%s not %s on %q after %s: %s", ns, name, want, node, timeout, describePod(last))
	}
	return last, nil
}

// podReady reports whether p's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitPodGone waits until the pod with uid is deleted (a new pod of the same
// name may exist).
func (h *Harness) WaitPodGone(ctx context.Context, ns, name string, uid string, timeout time.Duration) error {
	return poll.UntilContext(ctx, 200*time.Millisecond, timeout, func(ctx context.Context) bool {
		p, err := h.Cluster.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil || string(p.UID) != uid
	})
}

// WaitEvent waits for an Event about object name in ns with reason and a
// message containing substr, and returns it.
func (h *Harness) WaitEvent(ctx context.Context, ns, name string, reason vocab.EventReason, substr string, timeout time.Duration) (*corev1.Event, error) {
	return h.waitEvent(ctx, ns, name, reason, fmt.Sprintf("%q", substr), containing(substr), timeout)
}

// WaitMultiAttach waits for the attach/detach controller's Multi-Attach
// Event about pod name in ns — "Multi-Attach error" until Kubernetes
// v1.36, "Waiting for detach" since (diagnose.MultiAttachVolume) — and
// returns it.
func (h *Harness) WaitMultiAttach(ctx context.Context, ns, name string, timeout time.Duration) (*corev1.Event, error) {
	return h.waitEvent(ctx, ns, name, vocab.EventFailedAttachVolume, multiAttachMessage, diagnose.IsMultiAttach, timeout)
}

// multiAttachMessage names what diagnose.IsMultiAttach matches, in errors.
const multiAttachMessage = "a Multi-Attach message"

// containing matches a message that contains substr.
func containing(substr string) func(message string) bool {
	return func(m string) bool { return strings.Contains(m, substr) }
}

func (h *Harness) waitEvent(ctx context.Context, ns, name string, reason vocab.EventReason, what string, match func(message string) bool, timeout time.Duration) (*corev1.Event, error) {
	var found *corev1.Event
	err := poll.UntilContext(ctx, 500*time.Millisecond, timeout, func(ctx context.Context) bool {
		ev, err := h.findEvent(ctx, ns, name, reason, match)
		found = ev
		return err == nil && ev != nil
	})
	if err != nil {
		return nil, fmt.Errorf("no %s event with %s for %s/%s after %s", reason, what, ns, name, timeout)
	}
	return found, nil
}

// FindEvent returns an Event about object name in ns with reason and a
// message containing substr, or nil if there is none now.
func (h *Harness) FindEvent(ctx context.Context, ns, name string, reason vocab.EventReason, substr string) (*corev1.Event, error) {
	return h.findEvent(ctx, ns, name, reason, containing(substr))
}

func (h *Harness) findEvent(ctx context.Context, ns, name string, reason vocab.EventReason, match func(message string) bool) (*corev1.Event, error) {
	evs, err := h.Cluster.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return nil, err
	}
	for i, e := range evs.Items {
		if vocab.EventReason(e.Reason) == reason && match(e.Message) {
			return &evs.Items[i], nil
		}
	}
	return nil, nil
}

// VolumeAttachments returns the VolumeAttachments of persistent volume pv.
func (h *Harness) VolumeAttachments(ctx context.Context, pv string) ([]storagev1.VolumeAttachment, error) {
	list, err := h.Cluster.Client().StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []storagev1.VolumeAttachment
	for _, va := range list.Items {
		if src := va.Spec.Source.PersistentVolumeName; src != nil && *src == pv {
			out = append(out, va)
		}
	}
	return out, nil
}

// WaitNoVolumeAttachment waits until pv has no VolumeAttachment to node.
func (h *Harness) WaitNoVolumeAttachment(ctx context.Context, pv, node string, timeout time.Duration) error {
	return poll.UntilContext(ctx, 100*time.Millisecond, timeout, func(ctx context.Context) bool {
		vas, err := h.VolumeAttachments(ctx, pv)
		if err != nil {
			return false
		}
		for _, va := range vas {
			if va.Spec.NodeName == node {
				return false
			}
		}
		return true
	})
}

// TaintOutOfService applies the out-of-service taint to node, as an
// operator does with kubectl taint.
func (h *Harness) TaintOutOfService(ctx context.Context, node string) error {
	// The lifecycle controller writes the Node's taints too.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, OutOfServiceTaint)
		_, err = h.Cluster.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// VolumeFile is the file standing for pv's disk.
func (h *Harness) VolumeFile(pv string) string { return filepath.Join(h.VolumesDir, pv) }

// CheckVolume runs the data-safety checker on pv's disk.
func (h *Harness) CheckVolume(pv string) (csi.Report, error) {
	return csi.CheckVolume(h.VolumeFile(pv))
}

func describePod(p *corev1.Pod) string {
	if p == nil {
		return "no such pod"
	}
	s := fmt.Sprintf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
	if p.DeletionTimestamp != nil {
		s += ", terminating"
	}
	// What a real kubelet says of the containers (hollow kubelets say
	// little): why one waits or ended, its restarts.
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf(", %s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf(", %s terminated: %s %s", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.Message)
		case cs.RestartCount > 0 || !cs.Ready:
			s += fmt.Sprintf(", %s running (ready %v, restarts %d)", cs.Name, cs.Ready, cs.RestartCount)
		}
	}
	return s
}
