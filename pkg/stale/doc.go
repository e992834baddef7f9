// Package stale is stale VolumeAttachments: the cure and the fencers'
// reporter. A VolumeAttachment whose Node is Ready while nothing there
// uses the volume any more — or whose Node no longer exists — keeps every
// other node from attaching a ReadWriteOnce volume ("Multi-Attach error").
// diagnose.StaleAttachment is the rule; this package gathers its inputs
// and writes.
//
// The Cure is the one write, for `fenced diagnose --fix` (pkg/admin) and
// for the Reporter: read the VolumeAttachment again (the same UID; for a
// delete the same resourceVersion the caller checked), read the rule's
// inputs again from the API server and run the rule on them, then delete
// with preconditions on the UID and resourceVersion just checked — or,
// for one stuck in deletion, remove its finalizers by an update carrying
// that resourceVersion. Its Outcome says which, or why nothing was
// written. A deleted Node's attachment is written only when the caller
// says a person decided (AllowDeletedNode), and never while the
// operator's switches hold effects (Held).
//
// The Reporter finds them before a person runs
// `fenced diagnose`.
//
// The Reporter runs in every fencer (pkg/agent wires it). It watches
// VolumeAttachments and Nodes (from the agent's one cluster-scoped informer
// factory, shared with pkg/fencing), Pods, PersistentVolumes and
// PersistentVolumeClaims; every change queues the VolumeAttachments it
// concerns, by name. Whether one is stale is decided by
// diagnose.StaleAttachment, the one rule `fenced diagnose --fix` uses too;
// this package only gathers its inputs. A VolumeAttachment the rule finds
// nothing against, without a break, for policy.staleAttachmentGrace is
// reported: the gauge fenced_stale_volume_attachments, a Warning Event
// StaleVolumeAttachment on each pod waiting for the volume on another node
// (on the VolumeAttachment when none waits), a log line.
//
// That includes a VolumeAttachment stuck in deletion (seed 000 on a real
// attach/detach controller): the controller detaches by deleting it, and
// when the CSI driver cannot detach, the external-attacher's finalizer
// keeps it, with a deletionTimestamp and usually status.detachError, and
// the moved pod waits. Deleted for less than the grace, it is detaching
// normally and not reported; after that, if the rule holds, it is
// reported with a reason that says the detach is stuck. Its status
// changes (the attacher's retries) do not start the grace again.
//
// It deletes nothing unless policy.deleteStaleVolumeAttachments is on (and
// the opt-in RBAC grants it). Then the Cure writes: a failing or missing
// input, a refusal or a change in between means the VolumeAttachment
// stays (after a refusal or a Conflict it is held for the whole grace
// before the next try). Neither happens for a deleted Node's attachment
// or while the operator's switches hold effects (Config.Held).
package stale
