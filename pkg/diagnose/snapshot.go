package diagnose

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenced.io/fenced/pkg/fencing/core"
)

// Snapshot is everything Diagnose reads: API objects the caller listed, and
// per node what the caller parsed of fenced's own state. Pods and claims
// should be listed in every namespace: a pod of any namespace on the
// holding node may use the volume, and a claim left out reads as one that
// cannot be resolved (a refusal, never a deletion).
type Snapshot struct {
	Pods []*corev1.Pod
	// Events are the pods' FailedAttachVolume Events (others are ignored).
	Events            []*corev1.Event
	VolumeAttachments []*storagev1.VolumeAttachment
	Nodes             []*corev1.Node
	PVs               []*corev1.PersistentVolume
	PVCs              []*corev1.PersistentVolumeClaim
	Deployments       []*appsv1.Deployment
	ReplicaSets       []*appsv1.ReplicaSet
	// Fencing is fenced's state per node name; a node missing here is one
	// fenced says nothing about.
	Fencing map[string]NodeFencing
	Now     time.Time
}

// NodeFencing is what fenced shows about one node, as the caller parsed it
// from the Node (taint, evidence annotation), its Events, the BMC
// inventory and an agent's metrics. Pointers are nil when unknown.
type NodeFencing struct {
	// Tainted: the node has the out-of-service taint; ByFenced: fenced
	// applied it, with Evidence (nil when its annotation does not parse:
	// EvidenceError says why).
	Tainted, ByFenced bool
	Evidence          *core.Evidence
	EvidenceError     string
	// LastEvent is the latest Event fenced recorded on the Node.
	LastEvent *NodeEvent
	// Configured: the node has fencing levels (a BMC or other devices) in
	// the inventory the caller read; nil when the caller has none.
	Configured *bool
	// Fenceable: at least one fencing level answered the fencer's last
	// device check (the CannotBeFencedAutomatically / FenceDevicesAnswer
	// Events, or an agent's fenced_node_fence_levels_ready); FenceableSays
	// is where that was seen.
	Fenceable     *bool
	FenceableSays string
	// GracefulShutdown: the node's kubelet has graceful node shutdown
	// configured. The kubelet's configuration is not in the API: fenced's
	// agent on the node looks for the kubelet's logind shutdown delay
	// lock and publishes what it found on its own Lease
	// (publish.AnnotationGracefulShutdown), where `fenced diagnose` reads
	// it. nil when unknown (no agent word, or it could not ask logind):
	// then no risk is derived.
	GracefulShutdown *bool
}

// NodeEvent is one Event on a Node, reduced to what a human reads.
type NodeEvent struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
}

// Options narrow what Diagnose reports. The zero value reports every
// stuck pod in every namespace and no risks.
type Options struct {
	// Namespace keeps the findings (and risks) of one namespace.
	Namespace string
	// Pod keeps the findings of one pod (in Namespace).
	Pod string
	// Claim keeps the findings about one PersistentVolumeClaim (in
	// Namespace).
	Claim string
	// Node keeps the findings whose pod is on, or whose volume is held by,
	// this node, and its risks.
	Node string
	// Risks also lists latent risks (--all).
	Risks bool
}
