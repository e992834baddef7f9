package diagnose

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// RefusalReason says why a VolumeAttachment may not be deleted now.
type RefusalReason string

// Refusal reasons.
const (
	// RefuseNodeNotReady: the holding node is not Ready, so its kubelet's
	// view (volumesInUse, its pods) cannot be trusted; a dead node is
	// fenced, not cleaned up.
	RefuseNodeNotReady RefusalReason = "node-not-ready"
	// RefusePodUsesVolume: a pod on the holding node that has not finished
	// uses the volume.
	RefusePodUsesVolume RefusalReason = "pod-uses-volume"
	// RefuseClaimUnknown: a pod on the holding node uses a claim that
	// cannot be resolved, so it may be this volume.
	RefuseClaimUnknown RefusalReason = "claim-unknown"
	// RefuseVolumeInUse: the holding node's kubelet lists the volume in
	// status.volumesInUse: it is mounted there.
	RefuseVolumeInUse RefusalReason = "volume-in-use"
	// RefuseVolumeUnknown: the PersistentVolume is unknown, so
	// volumesInUse cannot be checked.
	RefuseVolumeUnknown RefusalReason = "volume-unknown"
	// RefuseWrongNode: the Node given is not the one the attachment names
	// (a caller's mistake, never a reason to delete).
	RefuseWrongNode RefusalReason = "wrong-node"
)

// Refusal is one reason a VolumeAttachment may not be deleted, with the
// object that shows it.
type Refusal struct {
	Reason RefusalReason `json:"reason"`
	Detail string        `json:"detail"`
}

func (r Refusal) String() string { return r.Detail }

// Attachment is what StaleAttachment needs to know about one
// VolumeAttachment: the object, its node (nil when the Node does not
// exist), its PersistentVolume (nil when unknown), the pods bound to that
// node and the claims they may use, by namespace/name.
type Attachment struct {
	VA     *storagev1.VolumeAttachment
	Node   *corev1.Node
	Volume *corev1.PersistentVolume
	Pods   []*corev1.Pod
	Claims map[string]*corev1.PersistentVolumeClaim
}

// StaleAttachment is the one rule that allows deleting a VolumeAttachment:
// either its Node no longer exists, or the Node is Ready, no
// pod bound to it that has not finished uses the volume, and its kubelet
// does not list the volume in status.volumesInUse. It returns nil when the
// deletion is safe, the reasons otherwise. The caller re-checks on fresh
// objects right before deleting and deletes with a precondition on the
// VolumeAttachment's UID and resourceVersion, so nothing that changed in
// between is deleted.
func StaleAttachment(a Attachment) []Refusal {
	if a.Node == nil {
		return nil
	}
	if a.VA != nil && a.VA.Spec.NodeName != a.Node.Name {
		return []Refusal{{RefuseWrongNode, fmt.Sprintf("the attachment is on node %s, not %s", a.VA.Spec.NodeName, a.Node.Name)}}
	}
	var refusals []Refusal
	if !NodeReady(a.Node) {
		refusals = append(refusals, Refusal{RefuseNodeNotReady, fmt.Sprintf("node/%s is not Ready", a.Node.Name)})
	}
	pvName := VolumeOf(a.VA)
	for _, p := range a.Pods {
		if p.Spec.NodeName != a.Node.Name || Finished(p) {
			continue
		}
		uses, unknown := PodUsesVolume(p, pvName, a.Claims)
		switch {
		case uses:
			refusals = append(refusals, Refusal{RefusePodUsesVolume, fmt.Sprintf("pod/%s/%s on node %s uses volume %s", p.Namespace, p.Name, a.Node.Name, pvName)})
		case unknown != "":
			refusals = append(refusals, Refusal{RefuseClaimUnknown, fmt.Sprintf("pod/%s/%s on node %s uses claim %s, which cannot be resolved", p.Namespace, p.Name, a.Node.Name, unknown)})
		}
	}
	if a.Volume == nil {
		refusals = append(refusals, Refusal{RefuseVolumeUnknown, fmt.Sprintf("persistentvolume/%s is unknown, so the kubelet's volumesInUse cannot be checked", orUnnamed(pvName))})
	} else if name := UniqueVolumeName(a.Volume); name == "" {
		refusals = append(refusals, Refusal{RefuseVolumeUnknown, fmt.Sprintf("persistentvolume/%s is not a CSI volume, so the kubelet's volumesInUse cannot be checked", a.Volume.Name)})
	} else if slices.Contains(a.Node.Status.VolumesInUse, corev1.UniqueVolumeName(name)) {
		refusals = append(refusals, Refusal{RefuseVolumeInUse, fmt.Sprintf("node/%s lists %s in status.volumesInUse: it is mounted there", a.Node.Name, name)})
	}
	return refusals
}

// VolumeOf is the name of the PersistentVolume va attaches; empty for nil
// or an inline volume (no PersistentVolume).
func VolumeOf(va *storagev1.VolumeAttachment) string {
	if va == nil || va.Spec.Source.PersistentVolumeName == nil {
		return ""
	}
	return *va.Spec.Source.PersistentVolumeName
}

// UniqueVolumeName is the name the kubelet and the attach/detach
// controller give a CSI PersistentVolume in a Node's status
// (volumesInUse, volumesAttached): kubernetes.io/csi/<driver>^<handle>.
// It is empty for a volume that is not CSI.
func UniqueVolumeName(pv *corev1.PersistentVolume) string {
	if pv == nil || pv.Spec.CSI == nil {
		return ""
	}
	return "kubernetes.io/csi/" + pv.Spec.CSI.Driver + "^" + pv.Spec.CSI.VolumeHandle
}

// PodUsesVolume reports whether pod p uses PersistentVolume pv through one
// of its claims. unknown names (namespace/name) a claim of p that claims
// does not hold, when no other claim matched: p may use pv through it.
func PodUsesVolume(p *corev1.Pod, pv string, claims map[string]*corev1.PersistentVolumeClaim) (uses bool, unknown string) {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		key := p.Namespace + "/" + v.PersistentVolumeClaim.ClaimName
		c, ok := claims[key]
		switch {
		case !ok || c == nil:
			unknown = key
		case c.Spec.VolumeName == pv && pv != "":
			return true, ""
		}
	}
	return false, unknown
}

// NodeReady reports whether n's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Finished reports whether p has ended (Succeeded or Failed): its kubelet
// tears its volumes down, and volumesInUse says when that is done.
func Finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// Refusals joins the details of rs for one line of text.
func Refusals(rs []Refusal) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.Detail
	}
	return strings.Join(parts, "; ")
}

func orUnnamed(s string) string {
	if s == "" {
		return "(unnamed)"
	}
	return s
}
