package csi

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestEnsureIsIdempotent(t *testing.T) {
	client := fake.NewClientset()
	for range 2 {
		if err := EnsureCSIDriver(t.Context(), client); err != nil {
			t.Fatal(err)
		}
		if err := EnsureStorageClass(t.Context(), client); err != nil {
			t.Fatal(err)
		}
	}
	d, err := client.StorageV1().CSIDrivers().Get(t.Context(), DriverName, metav1.GetOptions{})
	if err != nil || !*d.Spec.AttachRequired || !*d.Spec.PodInfoOnMount {
		t.Errorf("CSIDriver = %+v, %v", d, err)
	}
}

// TestPreBindForStatefulSet checks that each PVC and PV are bound to each
// other as the PV controller would have bound them.
func TestPreBindForStatefulSet(t *testing.T) {
	client := fake.NewClientset()
	pvs, pvcs, err := PreBindForStatefulSet(t.Context(), client, "ns", "data", "web", 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"data-web-0", "data-web-1"}; !slices.Equal(pvcs, want) {
		t.Fatalf("PVCs = %q, want %q", pvcs, want)
	}
	for i, claim := range pvcs {
		pvc, err := client.CoreV1().PersistentVolumeClaims("ns").Get(t.Context(), claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := client.CoreV1().PersistentVolumes().Get(t.Context(), pvs[i], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Spec.VolumeName != pv.Name || pvc.Status.Phase != corev1.ClaimBound ||
			pvc.Annotations["pv.kubernetes.io/bind-completed"] != "yes" || *pvc.Spec.StorageClassName != StorageClassName {
			t.Errorf("PVC %s = %+v", claim, pvc)
		}
		if ref := pv.Spec.ClaimRef; ref == nil || ref.Name != claim || ref.Namespace != "ns" || ref.UID != pvc.UID ||
			pv.Status.Phase != corev1.VolumeBound || pv.Spec.StorageClassName != StorageClassName ||
			pv.Spec.CSI.Driver != DriverName || pv.Spec.CSI.VolumeHandle != pv.Name ||
			pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain ||
			pv.Spec.AccessModes[0] != corev1.ReadWriteOnce {
			t.Errorf("PV %s = %+v", pv.Name, pv)
		}
	}
	if _, _, err := PreBindForStatefulSet(t.Context(), client, "ns", "data", "web", 1); err == nil {
		t.Error("creating the same volumes twice succeeded")
	}
}
