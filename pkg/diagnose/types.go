package diagnose

import "time"

// Cause is why a pod cannot attach its volume: one of the constants below.
type Cause string

// Causes, in the order Diagnose considers them.
const (
	// CauseDeadNode: the node holding the attachment is not Ready; its
	// pods cannot release the volume. Cure: fence it (the out-of-service
	// taint), which fenced does itself with evidence, or `fenced confirm`.
	CauseDeadNode Cause = "dead-node"
	// CauseDeletedNode: the VolumeAttachment names a Node that no longer
	// exists. Cure: delete the VolumeAttachment.
	CauseDeletedNode Cause = "deleted-node"
	// CauseStaleAttachment: the holding node is Ready but nothing on it
	// uses the volume any more (seed 000). Cure: delete the
	// VolumeAttachment, when StaleAttachment allows it.
	CauseStaleAttachment Cause = "stale-attachment"
	// CauseRollingUpdate: a Deployment with a ReadWriteOnce claim and the
	// RollingUpdate strategy started its new pod on another node while the
	// old one still runs (seed 001). Cure: the Recreate strategy (a patch
	// the operator applies), or ReadWriteMany storage.
	CauseRollingUpdate Cause = "rolling-update-rwo"
	// CauseSharedClaim: a pod of another workload, running on the holding
	// node, uses the same ReadWriteOnce claim. Cure: schedule them together
	// or give each its own claim.
	CauseSharedClaim Cause = "shared-claim"
	// CauseReadWriteOncePod: the claim is ReadWriteOncePod and another pod
	// uses it.
	CauseReadWriteOncePod Cause = "readwriteoncepod"
	// CauseAttachError: the CSI driver reports an attach or detach error on
	// the VolumeAttachment.
	CauseAttachError Cause = "attach-error"
	// CauseVolumeInUse: the holding node is Ready and a pod there (of the
	// same workload, e.g. still terminating) uses the volume: it will be
	// released when that pod ends. Nothing to cure.
	CauseVolumeInUse Cause = "in-use"
	// CauseUnknown: none of the above could be proven.
	CauseUnknown Cause = "unknown"
)

// FixAction is what would cure a Finding.
type FixAction string

// Fix actions.
const (
	// FixDeleteAttachment deletes the VolumeAttachment (stale or of a
	// deleted node), after StaleAttachment re-checks it.
	FixDeleteAttachment FixAction = "delete-volumeattachment"
	// FixReleaseAttachment removes the finalizers of a VolumeAttachment
	// that is already being deleted but that the CSI driver does not
	// detach (seed 000 on Kubernetes 1.34: the attach/detach controller
	// detaches by deleting the object; the driver's finalizer keeps it),
	// after StaleAttachment re-checks it. Deleting it again would change
	// nothing; removing the finalizer is what the external-attacher does
	// once the driver reports the volume detached.
	FixReleaseAttachment FixAction = "release-volumeattachment"
	// FixConfirmNode runs `fenced confirm` on the dead node, with its
	// evidence rules.
	FixConfirmNode FixAction = "confirm-node"
	// FixPatchWorkload is a change to a workload that fenced prints and
	// never applies.
	FixPatchWorkload FixAction = "patch-workload"
	// FixWait: the volume will be released by itself.
	FixWait FixAction = "wait"
	// FixManual: a person must look; the Fix's Command says where.
	FixManual FixAction = "manual"
)

// Fact is one observation that proves a Finding, e.g. a Node's Ready
// condition or an Event.
type Fact struct {
	// Object is kind/name (namespace/name for namespaced objects).
	Object string `json:"object"`
	// Says is what the object shows, for a human.
	Says string `json:"says"`
}

// Fix is how to cure a Finding.
type Fix struct {
	Action FixAction `json:"action"`
	// Command is the command (or patch) that cures it, for a human to run
	// or read.
	Command string `json:"command,omitempty"`
	// Automatic reports whether `fenced diagnose --fix` may apply it.
	Automatic bool `json:"automatic"`
	// Refusals say why the automatic cure is not safe right now; empty
	// when it is (or when there is none).
	Refusals []Refusal `json:"refusals,omitempty"`
}

// Finding is one pod that cannot attach one of its volumes, and why.
type Finding struct {
	// Pod is namespace/name; Node the node it is scheduled on.
	Pod  string `json:"pod"`
	Node string `json:"node,omitempty"`
	// Claim is the PersistentVolumeClaim (namespace/name), Volume the
	// PersistentVolume.
	Claim  string `json:"claim,omitempty"`
	Volume string `json:"volume"`
	// HeldBy is the node the volume is attached to; Attachment the
	// VolumeAttachment that says so.
	HeldBy     string `json:"heldBy,omitempty"`
	Attachment string `json:"attachment,omitempty"`
	// Since is when the pod was first seen unable to attach (its oldest
	// FailedAttachVolume Event, or its creation).
	Since time.Time `json:"since"`
	Cause Cause     `json:"cause"`
	// Summary is the cause in one sentence.
	Summary string `json:"summary"`
	// Proof lists the objects that show the cause.
	Proof []Fact `json:"proof"`
	// Fenced says what fenced is doing about it (for a dead node: its
	// phase and the evidence it waits for); empty when nothing.
	Fenced string `json:"fenced,omitempty"`
	Fix    Fix    `json:"fix"`
}

// RiskKind is a latent cause of a future Multi-Attach error.
type RiskKind string

// Risk kinds.
const (
	// RiskRollingUpdateRWO: a Deployment with a ReadWriteOnce claim and the
	// RollingUpdate strategy.
	RiskRollingUpdateRWO RiskKind = "rolling-update-rwo"
	// RiskUnfenceable: a StatefulSet pod with a ReadWriteOnce volume on a
	// node fenced cannot fence automatically (no fencing configured, or no
	// working power device).
	RiskUnfenceable RiskKind = "unfenceable-node"
	// RiskNoGracefulShutdown: a node whose kubelet has no graceful node
	// shutdown configured.
	RiskNoGracefulShutdown RiskKind = "no-graceful-shutdown"
)

// Risk is something that will cause a Multi-Attach error (or keep one
// from healing) when a node fails or a workload updates.
type Risk struct {
	Kind RiskKind `json:"kind"`
	// Object is kind/namespace/name or kind/name.
	Object string `json:"object"`
	Says   string `json:"says"`
	Fix    Fix    `json:"fix"`
}

// Report is the whole answer of Diagnose.
type Report struct {
	Findings []Finding `json:"findings"`
	// Risks are listed only when asked for (--all).
	Risks []Risk `json:"risks,omitempty"`
}

// Stuck reports whether anything cannot attach.
func (r Report) Stuck() bool { return len(r.Findings) > 0 }
