// Package stale is the fencers' report of stale VolumeAttachments (issue
// 12, item 4): a VolumeAttachment whose Node is Ready while nothing there
// uses the volume any more — or whose Node no longer exists — keeps every
// other node from attaching a ReadWriteOnce volume ("Multi-Attach error"),
// and nobody finds out until a person runs `fenced diagnose`.
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
// the opt-in RBAC grants it). Then it reads every input again from the API
// server, runs the rule on those fresh objects and deletes with a
// precondition on the VolumeAttachment's UID and resourceVersion: a
// failing or missing input, a refusal or a change in between means the
// VolumeAttachment stays. Deleting one stuck in deletion again would do
// nothing: after the same re-check it removes its finalizers instead, by
// an update carrying the resourceVersion re-checked (a Conflict keeps it,
// and it is held for the whole grace before the next try). Neither
// happens for a deleted Node's attachment or while the operator's
// switches hold effects (Config.Held).
package stale
