// Package fencing is the fencer loop: the controller that feeds the decision
// core (pkg/fencing/core) and carries out what it decides. It runs in every agent
// whose configuration holds power devices (a BMC inventory, or fence devices
// in a fencing topology).
//
// A failure travels through three files in three packages:
//
//  1. event: here, fencer.go — informers on Nodes, VolumeAttachments, power
//     Leases and the kubelets' node Leases (built by the agent, see
//     [NewInformers]), and gossip changes ([Fencer.Notify], the ring's change
//     handler), queue the node's name; sync builds a core.Observation from
//     them (observe) and calls core.Target.Step.
//  2. decision: pkg/fencing/core, decide.go — a pure state machine returns the node's
//     phase and the actions to take; only evidence leads to a taint.
//  3. action: here, fencer.go — execute carries out each action: BMC reads
//     and verified power actions through pkg/fencing/device, the power Lease, the
//     taint with its evidence, Ready=False and pod force-deletion through
//     pkg/taint, Events. Results come back as the next Observation.
//
// levels.go reads and switches a node's fencing levels in order through
// the [Inventory]'s plugs; monitor.go checks every power device now and
// then (Pacemaker's monitor operation); readgate.go bounds the power reads
// in flight, serving nodes that Kubernetes too sees failing first;
// stalekey.go stops trusting a key Lease a restarted agent has not
// replaced yet. verify.go checks that what a node says about itself over gossip is its
// own word (signatures against the key it published) and challenges agents
// for proofs of life; switches.go reads the operator's switches (the pause
// ConfigMap's informer, exclusion labels) and reports what the core held
// back (core.HeldBy); metrics.go holds the fencer's Prometheus metrics.
package fencing
