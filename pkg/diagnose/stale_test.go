package diagnose

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const testDriver = "csi.fenced.test"

func testVA(node, pv string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-" + pv + "-" + node},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: testDriver, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
	}
}

func testNode(name string, ready corev1.ConditionStatus, inUse ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	for _, v := range inUse {
		n.Status.VolumesInUse = append(n.Status.VolumesInUse, corev1.UniqueVolumeName(v))
	}
	return n
}

func testPV(name string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-" + name},
		}},
	}
}

func testClaim(ns, name, pv string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv},
	}
}

func testPod(ns, name, node string, phase corev1.PodPhase, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	p.Spec.NodeName = node
	p.Status.Phase = phase
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c},
		}})
	}
	return p
}

func TestStaleAttachment(t *testing.T) {
	claims := map[string]*corev1.PersistentVolumeClaim{
		"app/data":  testClaim("app", "data", "pv-1"),
		"app/other": testClaim("app", "other", "pv-2"),
	}
	inUse := "kubernetes.io/csi/" + testDriver + "^vol-pv-1"
	for _, tc := range []struct {
		name string
		a    Attachment
		want []RefusalReason
	}{
		{"deleted node", Attachment{VA: testVA("w-1", "pv-1")}, nil},
		{"ready node, nothing uses it", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue), Volume: testPV("pv-1"), Claims: claims}, nil},
		{"another volume in use", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue, "kubernetes.io/csi/"+testDriver+"^vol-pv-2"), Volume: testPV("pv-1"), Claims: claims,
			Pods: []*corev1.Pod{testPod("app", "b", "w-1", corev1.PodRunning, "other")}}, nil},
		{"finished pod on the node", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue), Volume: testPV("pv-1"), Claims: claims,
			Pods: []*corev1.Pod{testPod("app", "a", "w-1", corev1.PodSucceeded, "data")}}, nil},
		{"pod on another node", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue), Volume: testPV("pv-1"), Claims: claims,
			Pods: []*corev1.Pod{testPod("app", "a", "w-2", corev1.PodRunning, "data")}}, nil},
		{"not ready", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionUnknown), Volume: testPV("pv-1"), Claims: claims}, []RefusalReason{RefuseNodeNotReady}},
		{"no ready condition", Attachment{VA: testVA("w-1", "pv-1"), Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}}, Volume: testPV("pv-1"), Claims: claims}, []RefusalReason{RefuseNodeNotReady}},
		{"in volumesInUse", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue, inUse), Volume: testPV("pv-1"), Claims: claims}, []RefusalReason{RefuseVolumeInUse}},
		{"pending pod uses it", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue), Volume: testPV("pv-1"), Claims: claims,
			Pods: []*corev1.Pod{testPod("app", "a", "w-1", corev1.PodPending, "data")}}, []RefusalReason{RefusePodUsesVolume}},
		{"running pod uses it and mounted", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue, inUse), Volume: testPV("pv-1"), Claims: claims,
			Pods: []*corev1.Pod{testPod("app", "a", "w-1", corev1.PodRunning, "data")}}, []RefusalReason{RefusePodUsesVolume, RefuseVolumeInUse}},
		{"unresolvable claim", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue), Volume: testPV("pv-1"), Claims: claims,
			Pods: []*corev1.Pod{testPod("app", "a", "w-1", corev1.PodRunning, "gone")}}, []RefusalReason{RefuseClaimUnknown}},
		{"unknown volume", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue), Claims: claims}, []RefusalReason{RefuseVolumeUnknown}},
		{"not a CSI volume", Attachment{VA: testVA("w-1", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue), Volume: &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}}, Claims: claims}, []RefusalReason{RefuseVolumeUnknown}},
		{"wrong node", Attachment{VA: testVA("w-2", "pv-1"), Node: testNode("w-1", corev1.ConditionTrue), Volume: testPV("pv-1"), Claims: claims}, []RefusalReason{RefuseWrongNode}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []RefusalReason
			for _, r := range StaleAttachment(tc.a) {
				got = append(got, r.Reason)
				if r.Detail == "" {
					t.Errorf("refusal %s has no detail", r.Reason)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("StaleAttachment = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestVolumeOf: the PersistentVolume's name, empty for an inline volume
// and for no attachment.
func TestVolumeOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		va   *storagev1.VolumeAttachment
		want string
	}{
		{"persistent volume", testVA("n", "pv-1"), "pv-1"},
		{"inline volume", &storagev1.VolumeAttachment{}, ""},
		{"no attachment", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := VolumeOf(tc.va); got != tc.want {
				t.Errorf("VolumeOf = %q, want %q", got, tc.want)
			}
		})
	}
}
