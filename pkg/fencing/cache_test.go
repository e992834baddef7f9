package fencing

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTrimForCache: what the informers keep of an object is all of it but
// the managed fields and, of a Node, the image list.
func TestTrimForCache(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate,
		FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)}}
	node := hostileNode("w-1", "boot-1", "198.18.0.1", corev1.ConditionTrue)
	node.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoExecute}}
	node.Annotations = map[string]string{"a": "b"}
	want := node.DeepCopy()
	node.ManagedFields = managed
	node.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1 << 20}}
	lease := kubeletLease("w-1", metav1.Now().Time)
	wantLease := lease.DeepCopy()
	lease.ManagedFields = managed

	for _, tc := range []struct {
		name     string
		in, want any
	}{
		{"a Node", node, want},
		{"a kubelet Lease", lease, wantLease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TrimForCache(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("trimmed:\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
	// Not an object (a tombstone): passed through.
	tomb := "not an object"
	if got, err := TrimForCache(tomb); err != nil || got != tomb {
		t.Errorf("TrimForCache(%q) = %v, %v", tomb, got, err)
	}
}
