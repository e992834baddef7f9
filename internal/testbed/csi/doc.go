// Package csi is the test CSI driver of fenced's local cluster harness and
// the data-safety check built on it.
//
// A volume's "disk" is a plain file, <VolumesDir>/<volume id>, shared by all
// machines. While a pod has the volume published on a machine, that machine's
// [NodePlugin] appends one [Record] per interval to the file. Because the
// writes come from the machine's own process group, a frozen (SIGSTOPped)
// machine resumes writing when it is thawed, exactly like a hung node whose
// application comes back to life. [CheckVolume] then tells whether an old
// writer wrote after a newer one had started: two writers on one disk.
//
// [Attacher] plays the external-attacher for VolumeAttachments of this
// driver, and the objects helpers create the CSIDriver, PVs and PVCs that the
// scenarios use.
package csi

const (
	// DriverName is the CSI driver name (CSIDriver object, PV csi.driver,
	// VolumeAttachment spec.attacher, kubelet plugin registration).
	DriverName = "csi.fenced.test"

	// AttacherFinalizer is the finalizer the Attacher puts on the
	// VolumeAttachments it attached, named as external-attacher names it.
	AttacherFinalizer = "external-attacher/csi-fenced-test"

	// StorageClassName is the storage class of the PVs and PVCs created here.
	StorageClassName = "fenced-rwo"
)
