package fencing

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

// nodeState is what this fencer keeps about one node between its
// decisions. All of it is about the node's present Node object and goes
// with it: made on first use (stateOf) and dropped whole (forget) once the
// core has let go of a node whose Node is gone. Guarded by Fencer.mu.
//
// What the fencer keeps by node name but not here outlives a Node on
// purpose: the trust in the node's published keys and the statement
// numbers seen from them (Fencer.keys, Fencer.seqs: a Node deleted and
// registered again by the same boot keeps its agent's key, and forgetting
// what was seen from it would let an old statement count again), the
// clean-shutdown fences of the storm window (Fencer.cleanFences: a node's
// fence counts for the window however its Node fares), and what the
// device monitor found of the inventory's levels (Fencer.fenceable, pruned
// with the inventory).
type nodeState struct {
	// target is the decision core's state; nil until the node's first
	// decision.
	target *core.Target
	// seenReady: this fencer has seen the node Ready, so it is not joining.
	seenReady bool

	// Work running in the background for the node and what it brought
	// back for the core's next Observation.

	// power: the power reads and actions (startBMC).
	power core.BMCObs
	// agent: the liveness challenges and their answers (startChallenge).
	agent core.AgentObs
	// renew stops the renewal of the node's power Lease; nil when none
	// runs (powerlease.go).
	renew context.CancelFunc
	// kubeletLease is the watch of the node's kubelet Lease; nil while
	// the node is of no interest (kubeletlease.go).
	kubeletLease *kubeletLeaseWatch
	// order is the fence order this fencer sees for the node, and when it
	// first saw it (watchdog.go); zero when there is none.
	order seenOrder

	// What this fencer decided and has not written yet: the decisions of
	// other nodes count it as written (observe), as the write may still be
	// running on another worker (reserve, Fencer.unreserve).

	// acquiring: the node's power Lease is being acquired.
	acquiring bool
	// taintPending is the evidence of the out-of-service taint being
	// written, "" when none is.
	taintPending vocab.EvidenceMethod

	// What this fencer wrote that its informers may not show yet.

	// written is the Node as this fencer's own taint write returned it,
	// until the informer shows that write or a later one (freshest): the
	// fence goes on from it at once, not after the informer's lag.
	written *corev1.Node
	// podsDeleted is when the node's pods were last force-deleted.
	podsDeleted time.Time

	// restartSigned is when the node's agent left the ring for a restart,
	// once its word was verified (signedKept); zero otherwise.
	restartSigned time.Time

	// misfed: the device monitor found a level of this Ready node reading
	// off while its agent answered, and raised the alarm (monitor.go).
	misfed bool
}

// reserve marks what a decision's actions will write; f.mu held.
func (s *nodeState) reserve(actions []core.Action) {
	for _, a := range actions {
		switch a.Kind {
		case core.ActAcquireLease:
			s.acquiring = true
		case core.ActApplyTaint:
			s.taintPending = a.Evidence.Method
		}
	}
}

// unreserve ends node's reservations once its actions were carried out
// (a Lease acquired is counted by its renewal from then on, a taint
// written by the Node the write returned: freshest).
func (f *Fencer) unreserve(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.state[node]; ok {
		s.acquiring, s.taintPending = false, ""
	}
}

// stateOf is node's state, made when it has none; f.mu held.
func (f *Fencer) stateOf(node string) *nodeState {
	s, ok := f.state[node]
	if !ok {
		s = &nodeState{}
		f.state[node] = s
	}
	return s
}

// phaseOf is node's phase as the core last decided it, "" before its
// first decision; f.mu held.
func (f *Fencer) phaseOf(node string) core.Phase {
	if s, ok := f.state[node]; ok && s.target != nil {
		return s.target.Phase
	}
	return ""
}

// forget drops everything this fencer keeps about node, and its series in
// fenced_node_state; f.mu held. A renewal of its power Lease still
// running is stopped: the core releases the Lease of a node whose Node is
// gone, and an unreleased one lapses within its duration.
func (f *Fencer) forget(node string) {
	if s, ok := f.state[node]; ok {
		if s.renew != nil {
			s.renew()
		}
		f.unwatchKubeletLease(s)
	}
	delete(f.state, node)
	f.cfg.Metrics.forgetNode(node)
}
