// Package core is fenced's decision core: a state machine per target node
// that turns what is known about the node into what must be done, with no
// I/O (docs/design.md §3 and §4). It imports only the standard library and
// pkg/vocab (the words it shares with the other packages), which
// TestCoreStaysPure checks.
//
// A failure travels through three files in three packages:
//
//  1. event: pkg/fencing, fencer.go — informers (Nodes, VolumeAttachments,
//     Leases) and gossip notifications queue the node; Fencer.sync builds an
//     [Observation] (Fencer.observe) and calls [Target.Step].
//  2. decision: here, decide.go — [Target.Step] returns a [Decision]: the
//     node's [Phase] and the [Action]s to take. The only path to
//     [ActApplyTaint] is evidence ([Evidence]); table tests with a fake
//     clock and a randomized invariant walk drive it (decide_test.go). Its
//     transitions are explicit (transitions.go): one become<Phase> per
//     phase owns what survives the move, and a table says which moves
//     exist; every [Decision] lists its [Transition]s.
//  3. action: pkg/fencing, fencer.go — Fencer.execute carries out each Action:
//     BMC reads and verified power actions through pkg/fencing/device (power.go),
//     the taint with its evidence through pkg/taint. Their results come
//     back as later Observations.
//
// The words the core shares with the power device drivers of
// pkg/fencing/device ([vocab.PowerState], [vocab.ErrorKind], the Op names),
// with pkg/config ([vocab.Mode]) and with the Event recorders (the
// [vocab.EventReason] of its Actions) are pkg/vocab's, the one vocabulary
// and the only package besides the standard library the core imports. The
// core keeps its own words: its [Phase]s, [ActionKind]s and [Hold]s are its
// state and its output, named nowhere else. Here too is the rule that a
// BMC's system GUID names a Node ([SameSystemUUID], uuid.go), used by the
// core, by pkg/taint and by `fenced confirm`.
//
// [Evidence] (evidence.go) is fenced's one model of why a node is fenced:
// what the core decides a taint with, what `fenced confirm` builds from an
// operator's word, and, through its JSON tags, the format of the Node's
// evidence annotation that pkg/taint writes and reads. [Evidence.Validate] is
// the one rule of what counts as evidence on its own (docs/design.md §2); pkg/taint
// applies it before every taint and adds only the checks against the Node.
package core
