package csi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

const bindCompletedAnnotation = "pv.kubernetes.io/bind-completed"

// EnsureCSIDriver creates the CSIDriver object of DriverName, unless it
// exists. attachRequired makes the attach/detach controller create a
// VolumeAttachment per node, which is what fencing must clean up;
// podInfoOnMount makes the kubelet pass the pod name to NodePublishVolume.
//
// attachRequired needs kubelets with enableControllerAttachDetach: a kubelet
// without it (kubemark's hollow kubelet as released) tries to attach by
// itself, which a v1.34 kubelet refuses for CSI ("attaching volumes from the
// kubelet is not supported"), and the pod never starts (verified).
func EnsureCSIDriver(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: DriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       new(true),
			PodInfoOnMount:       new(true),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// EnsureStorageClass creates StorageClassName, without a provisioner,
// unless it exists. Volumes are made by CreateRWOVolume instead.
func EnsureStorageClass(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClassName},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: new(storagev1.VolumeBindingImmediate),
		ReclaimPolicy:     new(corev1.PersistentVolumeReclaimRetain),
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// CreateRWOVolume creates a ReadWriteOnce PVC namespace/name and a PV
// "<namespace>-<name>" of DriverName (volume handle = PV name, so the
// volume file is <VolumesDir>/<pvName>), bound to each other.
//
// It binds them itself, writing what the PV controller would write, so that
// nothing waits for the persistentvolume-binder controller; if it runs too,
// both write the same thing. The PV comes first and pre-bound to the claim:
// the controller marks a claim that looks bound but has no PV Lost, for
// good.
func CreateRWOVolume(ctx context.Context, client kubernetes.Interface, namespace, name, size string) (pvName, pvcName string, err error) {
	return CreateVolume(ctx, client, namespace, name, size, corev1.ReadWriteOnce)
}

// CreateVolume is CreateRWOVolume with another access mode for the PV and
// the PVC (e.g. ReadWriteOncePod).
func CreateVolume(ctx context.Context, client kubernetes.Interface, namespace, name, size string, mode corev1.PersistentVolumeAccessMode) (pvName, pvcName string, err error) {
	qty, err := resource.ParseQuantity(size)
	if err != nil {
		return "", "", err
	}
	pvName, pvcName = namespace+"-"+name, name
	rwo := []corev1.PersistentVolumeAccessMode{mode}
	capacity := corev1.ResourceList{corev1.ResourceStorage: qty}
	pvs, pvcs := client.CoreV1().PersistentVolumes(), client.CoreV1().PersistentVolumeClaims(namespace)

	_, err = pvs.Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      capacity,
			AccessModes:                   rwo,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              StorageClassName,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace, Name: pvcName},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: DriverName, VolumeHandle: pvName},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("create PV %s: %w", pvName, err)
	}
	pvc, err := pvcs.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: pvcName, Namespace: namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      rwo,
			Resources:        corev1.VolumeResourceRequirements{Requests: capacity},
			StorageClassName: new(StorageClassName),
			VolumeName:       pvName,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("create PVC %s/%s: %w", namespace, pvcName, err)
	}

	// The scheduler wants the bind-completed annotation on the claim; the
	// kubelet and the attach/detach controller want phase Bound.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv, err := pvs.Get(ctx, pvName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pv.Spec.ClaimRef.UID != pvc.UID {
			pv.Spec.ClaimRef.UID = pvc.UID
			if pv, err = pvs.Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if pv.Status.Phase != corev1.VolumeBound {
			pv.Status.Phase = corev1.VolumeBound
			_, err = pvs.UpdateStatus(ctx, pv, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return "", "", fmt.Errorf("bind PV %s: %w", pvName, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc, err := pvcs.Get(ctx, pvcName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !metav1.HasAnnotation(pvc.ObjectMeta, bindCompletedAnnotation) {
			metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, bindCompletedAnnotation, "yes")
			if pvc, err = pvcs.Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: rwo, Capacity: capacity}
			_, err = pvcs.UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return "", "", fmt.Errorf("bind PVC %s/%s: %w", namespace, pvcName, err)
	}
	return pvName, pvcName, nil
}

// StatefulSetVolumeSize is the size of the volumes PreBindForStatefulSet
// creates; the StatefulSet controller does not compare it with the claim
// template's request.
const StatefulSetVolumeSize = "1Gi"

// PreBindForStatefulSet creates, for ordinals 0..replicas-1, the bound PVC
// "<claimTemplate>-<stsName>-<ordinal>" that the StatefulSet controller
// would create from its volumeClaimTemplate, so that the StatefulSet uses
// it and no provisioner is needed. It returns the PV and PVC names by
// ordinal.
func PreBindForStatefulSet(ctx context.Context, client kubernetes.Interface, namespace, claimTemplate, stsName string, replicas int) (pvNames, pvcNames []string, err error) {
	for i := range replicas {
		pv, pvc, err := CreateRWOVolume(ctx, client, namespace, fmt.Sprintf("%s-%s-%d", claimTemplate, stsName, i), StatefulSetVolumeSize)
		if err != nil {
			return pvNames, pvcNames, err
		}
		pvNames, pvcNames = append(pvNames, pv), append(pvcNames, pvc)
	}
	return pvNames, pvcNames, nil
}
