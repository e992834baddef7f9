package stale

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/pkg/diagnose"
)

func node(ready corev1.ConditionStatus, inUse ...corev1.UniqueVolumeName) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{
		Conditions:   []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}},
		VolumesInUse: inUse,
	}}
}

// TestNodeChanged: a Node update queues its attachments exactly when what
// diagnose.StaleAttachment reads of the Node changed.
func TestNodeChanged(t *testing.T) {
	withHeartbeat := node(corev1.ConditionTrue)
	withHeartbeat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	withHeartbeat.ResourceVersion = "2"
	for _, tc := range []struct {
		name     string
		old, new any
		want     bool
	}{
		{"heartbeat only", node(corev1.ConditionTrue), withHeartbeat, false},
		{"ready to not ready", node(corev1.ConditionTrue), node(corev1.ConditionFalse), true},
		{"ready to unknown", node(corev1.ConditionTrue), node(corev1.ConditionUnknown), true},
		{"volume mounted", node(corev1.ConditionTrue), node(corev1.ConditionTrue, "kubernetes.io/csi/d^v"), true},
		{"volume unmounted", node(corev1.ConditionTrue, "kubernetes.io/csi/d^v"), node(corev1.ConditionTrue), true},
		{"not a node", "x", node(corev1.ConditionTrue), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodeChanged(tc.old, tc.new); got != tc.want {
				t.Errorf("nodeChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStaleReason names the node and the volume, says when the Node is
// gone, and for an attachment being deleted that its detach is stuck,
// since when, what keeps it and the driver's detach error.
func TestStaleReason(t *testing.T) {
	now := time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va"},
		Spec: storagev1.VolumeAttachmentSpec{NodeName: "n", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-1")}}}
	deleting := va.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: now.Add(-5 * time.Minute)}
	deleting.Finalizers = []string{"external-attacher/csi-fenced-test"}
	failing := deleting.DeepCopy()
	failing.Status.DetachError = &storagev1.VolumeError{Message: "rpc error: code = Internal desc = detach failed"}
	for _, tc := range []struct {
		name      string
		a         diagnose.Attachment
		want, not []string
	}{
		{"live node", diagnose.Attachment{VA: va, Node: node(corev1.ConditionTrue)}, []string{"node/n is Ready", "pv-1", "volumesInUse"}, []string{"stuck"}},
		{"deleted node", diagnose.Attachment{VA: va}, []string{"node/n no longer exists"}, []string{"stuck"}},
		{"stuck detach", diagnose.Attachment{VA: deleting, Node: node(corev1.ConditionTrue)},
			[]string{"node/n is Ready", "detach is stuck", "deleted 5m0s ago", "finalizer external-attacher/csi-fenced-test", "no detachError"}, nil},
		{"stuck detach with an error", diagnose.Attachment{VA: failing, Node: node(corev1.ConditionTrue)},
			[]string{"detach is stuck", `detachError: "rpc error: code = Internal desc = detach failed"`}, []string{"no detachError"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := staleReason(tc.a, now)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("staleReason = %q, want it to contain %q", got, w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(got, w) {
					t.Errorf("staleReason = %q, want it without %q", got, w)
				}
			}
		})
	}
}

// TestNewNeedsRecorder: a Reporter that could not record Events would
// report nothing anyone sees.
func TestNewNeedsRecorder(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a recorder: no error")
	}
}

// TestTrimPod keeps what diagnose.StaleAttachment, the waiting pods and
// the Events read of a pod, and its claims only.
func TestTrimPod(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "7",
			Labels: map[string]string{"app": "x"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "i"}}, Volumes: []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim"}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Message: "m"},
	}
	o, err := trimPod(p)
	if err != nil {
		t.Fatal(err)
	}
	got := o.(*corev1.Pod)
	if got.Name != "p" || got.Namespace != "ns" || got.UID != "u" || got.ResourceVersion != "7" ||
		got.Spec.NodeName != "n" || got.Status.Phase != corev1.PodRunning {
		t.Errorf("trimmed pod lost what the report reads: %+v", got)
	}
	if uses, _ := diagnose.PodUsesVolume(got, "pv", map[string]*corev1.PersistentVolumeClaim{
		"ns/claim": {Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv"}}}); !uses {
		t.Error("the trimmed pod no longer uses its claim's volume")
	}
	if len(got.Spec.Volumes) != 1 || len(got.Spec.Containers) != 0 || got.Labels != nil || got.ManagedFields != nil || got.Status.Message != "" {
		t.Errorf("trimmed pod keeps more than the report reads: %+v", got)
	}
	if o, _ := trimPod("not a pod"); o != "not a pod" {
		t.Errorf("trimPod changed a non-pod: %v", o)
	}
}
