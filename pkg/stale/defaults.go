package stale

import "time"

// The stale report's defaults, each with its reason. New applies
// DefaultGrace to a Config whose Grace is zero; DefaultDelete is Delete's
// zero. pkg/config leaves policy.staleAttachmentGrace and
// policy.deleteStaleVolumeAttachments unset (zero) when the file does not
// set them.
const (
	// DefaultGrace: a VolumeAttachment must look stale
	// (diagnose.StaleAttachment finds nothing against it) this long without
	// a break before a fencer reports it. Two minutes outlast the informers'
	// lag and a kubelet's mount of a pod that just started (volumesInUse is
	// written before the mount), yet an alert fires long before a person
	// would have found the cause by hand.
	DefaultGrace = 2 * time.Minute
	// DefaultDelete: fencers report stale VolumeAttachments and never
	// delete them unless told to (and given the RBAC for it,
	// deploy/daemonset/components/delete-stale-volumeattachments).
	DefaultDelete = false
)
