package core

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// This file is the decision core: a state machine per target node, with no
// I/O. The fencer loop (pkg/fencing, fencer.go) feeds it an Observation —
// everything known about the node, its gossip member, its BMC and the
// cluster, plus the time — and carries out the Actions it returns. Results of those
// actions come back as later Observations. Tests drive it from tables with
// a fake clock (decide_test.go).
//
// The one rule it must never break (docs/design.md §2): ApplyTaint is returned
// only with evidence that the node cannot write to its volumes — a BMC
// reading of "off" taken after the node stopped answering, whose GUID (when
// known on both sides) matches the node; the node's own clean-shutdown
// announcement for its current boot after which it left the ring; or (in
// `fenced confirm`, not here) an operator's confirmation. Everything else is
// suspicion.

// Phase is where a target node stands.
type Phase string

// Phases, in the order a failure walks through them.
const (
	PhaseHealthy     Phase = "Healthy"     // responsive, or not our business
	PhaseSuspect     Phase = "Suspect"     // stopped answering on a channel; no evidence yet
	PhaseConfirming  Phase = "Confirming"  // asking (or waiting to ask again) the BMC
	PhasePoweringOff Phase = "PoweringOff" // power-off mode: switching it off under the lease
	PhaseFenced      Phase = "Fenced"      // tainted with evidence
	PhaseRecovering  Phase = "Recovering"  // back with a new boot; waiting for old attachments to go
	PhaseReturning   Phase = "Returning"   // out-of-service taint off, fenced's returning taint on until the controller-manager saw that
)

// Ready is the status of a Node's Ready condition.
type Ready string

// Ready values, as Kubernetes spells them.
const (
	ReadyTrue    Ready = "True"
	ReadyFalse   Ready = "False"
	ReadyUnknown Ready = "Unknown"
)

// NodeObs is what the API says about the node.
type NodeObs struct {
	Exists bool
	Ready  Ready
	// ReadySince is the Ready condition's last transition time.
	ReadySince   time.Time
	BootID       string
	SystemUUID   string
	ControlPlane bool
	// TaintedByFenced: the out-of-service taint is there with fenced's
	// annotation; Evidence is what the annotation records.
	TaintedByFenced bool
	Evidence        *Evidence
	// NewerEvidenceFormat is, when not 0, the format of an evidence
	// annotation written by a newer fenced, which this one cannot read
	// (Evidence is nil then): evidence present but unreadable. The core
	// leaves such a node alone (leaveToNewerFenced).
	NewerEvidenceFormat int
	// VolumeAttachments of this node that still exist.
	VolumeAttachments int
	// ShuttingDown: the kubelet reports a graceful node shutdown in
	// progress (its Ready condition says "node is shutting down").
	ShuttingDown bool
	// NeverReady: the node has not been Ready since it registered — it is
	// joining the cluster, not gone. Nothing that needs fencing can run
	// there: pods with volumes are only scheduled to Ready nodes.
	NeverReady bool
	// KubeletRenew is the renew time of the kubelet's node Lease (its
	// heartbeat, written under NodeRestriction), by the kubelet's clock.
	KubeletRenew time.Time
	// PodsForceDeleted: the node's pods were force-deleted for the fence
	// it carries now.
	PodsForceDeleted bool
	// Excluded is the label that excludes the node from fencing
	// (fenced.io/exclude or medik8s' exclude-from-remediation, value
	// "true"), or "" (hold.go).
	Excluded string
	// Returning is fenced's record of the swap that took its
	// out-of-service taint off, while it is on the Node (returning.go);
	// nil otherwise.
	Returning *Returning
	// Cordon is the node's cordon and the node lifecycle controller's
	// taint for it: what tells that the controller-manager saw the swap.
	Cordon Cordon
	// FencedWhenDeleted is the evidence of the fence a Node of this name
	// carried when it was deleted (ActNodeDeleted), while the fencer
	// remembers it: this Node registered since. nil otherwise.
	FencedWhenDeleted *Evidence
}

// MemberObs is what gossip says about the node's agent. Any holder of the
// gossip key can say any of it in any member's name, except what Signed
// vouches for.
type MemberObs struct {
	Known bool
	State vocab.MemberState
	Since time.Time
	// BootID and Announced come from the member's metadata.
	BootID    string
	Announced vocab.Announcement
	// Signed: Announced and BootID (and, for a left member, its leave
	// notice) are signed with the key the node itself published for that
	// boot, and are not a replay of an older statement. Only then is the
	// announcement the node's own word.
	Signed bool
	// Silent: the alive member's beats to this fencer stopped (its
	// Detector said so, pkg/heartbeat); SilentSince is when its last beat
	// came. The first and cheapest sign of a power loss, and the one any
	// gossip-key holder can hold back with forged beats: it only hastens
	// a power read, and a forged beat only delays it.
	Silent      bool
	SilentSince time.Time
	// Doubt: its beats are late, not yet stopped (SilentSince is its last
	// beat then too): worth a liveness challenge, not a power read, so
	// that the agent's answer or silence is in when the beats have
	// stopped.
	Doubt bool
}

// AgentObs is what the node's agent proved to this fencer: answers to
// liveness challenges sent to the node's address from the Kubernetes API.
// Unlike gossip state, silence here cannot be forged for a live node, nor
// an answer for a dead one.
type AgentObs struct {
	// LastProof is when the agent last answered a challenge.
	LastProof time.Time
	// SilentSince is when the first of the current run of unanswered
	// challenges was sent, LastSilent when the latest one was, and
	// SilentUntil when the wait for its answer ended; all are zero after
	// an answer.
	SilentSince, LastSilent, SilentUntil time.Time
	// Challenging: a challenge is waiting for its answer.
	Challenging bool
}

// BMCObs is what fenced knows from the node's BMC.
type BMCObs struct {
	Configured bool
	// Reading is the latest successful power reading, if any.
	Reading *Reading
	// Failure is the latest failed request, if any.
	Failure *Failure
	// InFlight: a read or a power action is running now.
	InFlight bool
}

// Failure is one failed BMC request.
type Failure struct {
	Op      string
	Kind    vocab.ErrorKind
	Message string
	At      time.Time
}

// ClusterObs is the context a power action needs.
type ClusterObs struct {
	// Nodes in the cluster, and how many are unhealthy (not Ready, dead in
	// gossip, or fenced), this one included.
	Nodes, Unhealthy int
	// GossipAlive is the number of ring members alive as this fencer sees
	// them, itself included.
	GossipAlive int
	// PowerActions is the number of power-off Leases held now, by any
	// fencer, for other nodes.
	PowerActions int
	// ControlPlaneDown counts other control-plane nodes that are fenced or
	// being switched off.
	ControlPlaneDown int
	// LeaseHeld: this fencer holds the target's Lease.
	LeaseHeld bool
	// CleanShutdownFences counts other nodes tainted with clean-shutdown
	// evidence within the policy's StormWindow.
	CleanShutdownFences int
	// Paused: the cluster-wide pause is on (hold.go); PauseReason is what
	// the operator wrote as its reason, if anything.
	Paused      bool
	PauseReason string
}

// Observation is the input of one Step.
type Observation struct {
	Now    time.Time
	Node   NodeObs
	Member MemberObs
	Agent  AgentObs
	BMC    BMCObs
	// Watchdog is the node's watchdog level, when its topology has one.
	Watchdog WatchdogObs
	Cluster  ClusterObs
}

// unknownMethod stands for a fence adopted from a taint whose evidence
// annotation is missing or unreadable.
const unknownMethod vocab.EvidenceMethod = "unknown"

// ActionKind names what the fencer loop must do.
type ActionKind string

// Actions.
const (
	ActReadPower       ActionKind = "ReadPower"       // read power state and GUID
	ActAcquireLease    ActionKind = "AcquireLease"    // take the target's power Lease
	ActReleaseLease    ActionKind = "ReleaseLease"    // give it back
	ActPowerOff        ActionKind = "PowerOff"        // switch off and confirm off (under the Lease)
	ActPowerOn         ActionKind = "PowerOn"         // switch on again after a fence
	ActApplyTaint      ActionKind = "ApplyTaint"      // taint with Evidence
	ActMarkNotReady    ActionKind = "MarkNotReady"    // fast path: Ready=False reason PoweredOff
	ActForceDeletePods ActionKind = "ForceDeletePods" // fast path: pods deleted with grace 0
	ActRemoveTaint     ActionKind = "RemoveTaint"     // the node is back: swap the taint for fenced's returning taint (returning.go)
	ActLiftReturning   ActionKind = "LiftReturning"   // the controller-manager saw the swap: lift the returning taint
	ActEvent           ActionKind = "Event"           // a Kubernetes Event on the Node
	ActSafetyAlarm     ActionKind = "SafetyAlarm"     // evidence proved wrong: Event, metric, error log
	ActRequeue         ActionKind = "Requeue"         // call Step again after After
	ActChallenge       ActionKind = "Challenge"       // ask the node's agent for a proof of life
	ActHeld            ActionKind = "Held"            // an effect a switch held back: report it (hold.go)
	ActNodeDeleted     ActionKind = "NodeDeleted"     // the Node of a fenced node was deleted: remember its fence (Evidence) for its return
	ActNodeRegistered  ActionKind = "NodeRegistered"  // a Node deleted while fenced registered again: forget its fence
	ActQuietReadOn     ActionKind = "QuietReadOn"     // beats alone stopped and the power reads on: log and count it (Message)
	ActOrderReset      ActionKind = "OrderReset"      // write a fence order for the node's boot (BootID): its watchdog resets it (watchdoglevel.go)
	ActWithdrawOrder   ActionKind = "WithdrawOrder"   // delete the fence order of a boot that is over (BootID)
)

// Action is one thing to do.
type Action struct {
	Kind ActionKind
	// Evidence for ActApplyTaint, and the fence's for ActNodeDeleted and
	// ActNodeRegistered.
	Evidence *Evidence
	// EventType ("Normal" or "Warning"), Reason and Message for ActEvent
	// and ActSafetyAlarm; Message also explains ActRemoveTaint,
	// ActLiftReturning, and is the reason of ActNodeDeleted and
	// ActNodeRegistered.
	EventType string
	Reason    vocab.EventReason
	Message   string
	// After for ActRequeue.
	After time.Duration
	// Within for ActChallenge: how long the agent has to answer (0: the
	// fencer's own bound, fencing.DefaultChallengeTimeout).
	Within time.Duration
	// Held and Hold, for ActHeld: the action held back, and by what.
	Held ActionKind
	Hold Hold
	// BootID for ActOrderReset and ActWithdrawOrder: the boot the order
	// is for.
	BootID string
}

// TaintRetry is how long the core waits to see its own taint on the Node
// before writing it again (and to see the rest of the fence done before
// redoing it). The fencer goes on from the Node its write returned, so a
// write that succeeded is seen at once: a retry means the write failed.
const TaintRetry = 2 * time.Second

// SuspectSince is when the current suspicion began (zero when healthy).
func (t *Target) SuspectSince() time.Time { return t.suspicion.since }

// Target is the decision state of one node. The zero value (with Name
// set) is a healthy node. Its state can always be rebuilt from the API
// (the taint annotations), so a restarted fencer carries on. Only the
// become<Phase> functions (transitions.go) change its phase or start it
// over; each phase's state is a struct of its own.
type Target struct {
	Name  string
	Phase Phase
	Since time.Time // when Phase was entered

	suspicion suspicion
	voided    voided
	power     powerOff
	fence     fence
	reports   reports
}

// Decision is the result of one Step: the actions, and one line saying
// why, for the decision log.
type Decision struct {
	Phase   Phase
	Reason  string
	Actions []Action
	// Transitions are the phase changes of this step, in order; each one
	// is in the table of transitions (Transition.Allowed) unless the core
	// has a bug (transitions.go).
	Transitions []Transition
}

// Step advances the target with observation o under policy p.
func (t *Target) Step(o Observation, p Policy) Decision {
	d := &decider{t: t, o: o, p: p}
	if t.Phase == "" {
		// A new target: Healthy from now on.
		d.becomeHealthy("new", voided{})
	}
	d.step()
	return Decision{Phase: t.Phase, Reason: d.reason, Actions: d.actions, Transitions: d.transitions}
}

type decider struct {
	t           *Target
	o           Observation
	p           Policy
	reason      string
	actions     []Action
	transitions []Transition
}

// do adds a to the decision — unless one of the operator's switches holds
// it back (HeldBy): then it is reported, once per suspicion, as ActHeld.
// It reports whether a goes out.
func (d *decider) do(a Action) bool {
	if h := d.heldBy(a.Kind); h != HoldNone {
		d.hold(h, a)
		return false
	}
	d.actions = append(d.actions, a)
	return true
}

// notice emits an Event once per distinct key, so a node that stays in
// one situation does not flood the API.
func (d *decider) notice(key, eventType string, reason vocab.EventReason, msg string) {
	if d.t.reports.lastNotice == key || d.t.suspicion.quiet {
		// Said once; or a quiet suspicion (beatsAlone), which says nothing
		// until another channel agrees.
		return
	}
	d.t.reports.lastNotice = key
	d.do(Action{Kind: ActEvent, EventType: eventType, Reason: reason, Message: msg})
}

func (d *decider) requeue(after time.Duration) {
	if after < 0 {
		after = 0
	}
	d.do(Action{Kind: ActRequeue, After: after})
}

func (d *decider) step() {
	o, t := d.o, d.t
	if !o.Node.Exists {
		if o.Cluster.LeaseHeld {
			d.do(Action{Kind: ActReleaseLease})
		}
		d.deleted()
		d.becomeHealthy("node object gone", voided{})
		return
	}
	if o.Node.FencedWhenDeleted != nil {
		d.registeredAgain(o.Node.FencedWhenDeleted)
	}
	if o.Node.TaintedByFenced && o.Node.NewerEvidenceFormat > 0 {
		d.leaveToNewerFenced()
		return
	}
	d.followTaint()
	d.withdrawStaleOrder()
	switch t.Phase {
	case PhaseFenced, PhaseRecovering:
		d.fenced()
	case PhaseReturning:
		d.returning()
	case PhasePoweringOff:
		d.poweringOff()
	default:
		d.detect()
	}
}

// deleted reports a fenced node whose Node object is gone — deleted by a
// person or a tool while it carried fenced's out-of-service taint, which
// went with it — and hands its fence to the fencer to remember for the
// node's return (registeredAgain).
func (d *decider) deleted() {
	t := d.t
	if (t.Phase != PhaseFenced && t.Phase != PhaseRecovering) || !t.fence.taintSeen || t.fence.evidence == nil {
		return
	}
	ev := t.fence.evidence
	d.do(Action{Kind: ActEvent, EventType: "Warning", Reason: vocab.EventFencedNodeDeleted, Message: fmt.Sprintf(
		"the Node object was deleted while fenced (%s evidence taken at %s, boot %s): its out-of-service taint and evidence went with it. If the node registers again, its new Node carries no taint and fenced judges it as any node — with the safety alarm if it answers with the fenced boot",
		ev.Method, evidenceTime(ev).UTC().Format(time.RFC3339), ev.BootID)})
	d.do(Action{Kind: ActNodeDeleted, Evidence: ev, Message: "the Node object was deleted while fenced"})
}

// registeredAgain reports, once, the return of a node whose Node object
// was deleted while fenced (deleted): with the boot it was fenced at, the
// evidence was wrong — the safety alarm; with another, a new Node with no
// taint, judged as any node.
func (d *decider) registeredAgain(fence *Evidence) {
	boot := d.o.Node.BootID
	why := "registered again on boot " + boot + ", no taint carried over"
	if fence.BootID != "" && boot == fence.BootID {
		why = "registered again with the boot it was fenced at (" + boot + "): safety alarm"
		d.do(Action{Kind: ActSafetyAlarm, EventType: "Warning", Reason: vocab.EventFencedNodeBackWithSameBootID, Message: fmt.Sprintf(
			"SAFETY: node registered again, after its Node object was deleted while fenced with %s evidence, with the same boot ID %s: it was never off. Two writers may have shared its volumes; investigate the BMC inventory. Its new Node carries no taint.",
			fence.Method, boot)})
	} else {
		d.do(Action{Kind: ActEvent, EventType: "Normal", Reason: vocab.EventFencedNodeRegisteredAgain, Message: fmt.Sprintf(
			"registered again after its Node object was deleted while fenced (%s evidence taken at %s, boot %s); now boot %s, no taint carried over: judged as any node",
			fence.Method, evidenceTime(fence).UTC().Format(time.RFC3339), fence.BootID, boot)})
	}
	d.do(Action{Kind: ActNodeRegistered, Evidence: fence, Message: why})
}

// followTaint follows the taint annotations, the durable state: it adopts
// a fence made by another fencer, or by this one before a restart; it
// notes our own taint's landing; it starts over when the taint was
// removed from outside; and it adopts a returning taint (returning.go).
func (d *decider) followTaint() {
	o, t := d.o, d.t
	if o.Node.TaintedByFenced && (t.Phase != PhaseFenced && t.Phase != PhaseRecovering || t.fence.unreadable) {
		ev := o.Node.Evidence
		if ev == nil {
			ev = &Evidence{Method: unknownMethod}
		}
		d.becomeFenced("adopted existing fenced taint", &fence{evidence: ev, taintSeen: true})
	}
	if o.Node.TaintedByFenced && (t.Phase == PhaseFenced || t.Phase == PhaseRecovering) && !t.fence.taintSeen {
		// Our own taint has landed: the fence is a fact now, and the Event
		// says so (dated with the evidence, not with the decision).
		t.fence.taintSeen = true
		if f := t.fence.evidence; f != nil {
			d.do(Action{Kind: ActEvent, EventType: "Warning", Reason: vocab.EventNodeFenced, Message: fmt.Sprintf(
				"tainted out-of-service with %s evidence taken at %s: %s",
				f.Method, evidenceTime(f).UTC().Format(time.RFC3339Nano), f.Reason)})
		}
	}
	if !o.Node.TaintedByFenced && t.fence.taintSeen {
		// Removed by `fenced unfence` or by hand: start over from what
		// the node looks like now. (Until the taint has been seen once, an
		// absent taint is only the informer lagging behind our own write.)
		d.becomeHealthy("fenced taint removed from outside", voided{})
	}
	if o.Node.Returning != nil && !o.Node.TaintedByFenced && t.phase() == PhaseHealthy {
		// Swapped by this fencer before a restart, by another fencer, or
		// by `fenced unfence`: the lift is every fencer's job.
		d.becomeReturning("adopted fenced's returning taint")
	}
}

// leaveToNewerFenced handles a node fenced by a newer fenced, whose
// evidence this one cannot read (a rolling upgrade under way, or rolled
// back). The fence is that fenced's: nothing here may judge it over (no
// recovery, no taint removal), redo it (no Ready=False, no pod deletion,
// no power action) or fence again. The target waits in Fenced, the taint
// seen, so that once the newer fenced has removed the taint it starts over
// from Healthy (followTaint); and once the annotation is readable (an
// upgrade of this fencer reads it anew) it adopts the fence as any other.
func (d *decider) leaveToNewerFenced() {
	o, t := d.o, d.t
	if o.Cluster.LeaseHeld {
		d.do(Action{Kind: ActReleaseLease})
	}
	why := fmt.Sprintf("evidence written by a newer fenced (format %d); leaving node %s alone — upgrade this fencer",
		o.Node.NewerEvidenceFormat, t.Name)
	if t.Phase != PhaseFenced || !t.fence.unreadable {
		d.becomeFenced(why, &fence{taintSeen: true, unreadable: true})
	}
	d.reason = why
	d.notice(fmt.Sprintf("newer-evidence-%d", o.Node.NewerEvidenceFormat), "Warning", vocab.EventEvidenceFromNewerFenced, why)
}

// unresponsive reports whether either channel says the node is gone. A
// gossip "alive" that the agent itself did not back up — a challenge sent
// after it went unanswered — is not the node's word and counts as gone.
func (d *decider) unresponsive() bool {
	o := d.o
	return o.Node.Ready != ReadyTrue || o.Member.State.Gone() || d.aliveUnbacked() || o.Member.Silent
}

// beatsAlone reports whether the node's beats to this fencer stopped while
// every other channel still answers: the first sign of a power loss —
// gossip's verdict comes seconds later, the kubelet's a minute — and the
// most common false one (lost packets, a starved node). It is worth one
// power read, quietly: the suspicion it starts says nothing (no Event)
// until another channel agrees or the power reads off.
func (d *decider) beatsAlone() bool {
	o := d.o
	return o.Member.Silent && o.Member.State == vocab.MemberAlive && o.Node.Ready == ReadyTrue && !d.aliveUnbacked()
}

// beatsLate reports whether the node's beats are late (MemberObs.Doubt)
// and its agent was not asked since its last beat: asked now, its answer
// or silence is in by the time the beats have stopped — a challenge, not
// a power read, and no suspicion.
func (d *decider) beatsLate() bool {
	o := d.o
	m, a := o.Member, o.Agent
	return m.Doubt && m.State == vocab.MemberAlive && !m.SilentSince.IsZero() && !a.Challenging &&
		!a.LastProof.After(m.SilentSince) && !a.LastSilent.After(m.SilentSince)
}

// silenceFrom is when the agent's silence to a challenge starts to count
// for this suspicion: its start — or, for a node whose beats stopped,
// its last beat, for a challenge sent when they were late asked about the
// same silence (beatsLate).
func (d *decider) silenceFrom() time.Time {
	since := d.t.suspicion.since
	if m := d.o.Member; m.Silent && !m.SilentSince.IsZero() && m.SilentSince.Before(since) {
		return m.SilentSince
	}
	return since
}

// aliveUnbacked reports whether gossip says the member is alive while its
// agent left a challenge sent after that unanswered.
func (d *decider) aliveUnbacked() bool {
	o, a := d.o, d.o.Agent
	return o.Member.State == vocab.MemberAlive && a.LastSilent.After(o.Member.Since) && !a.LastProof.After(a.LastSilent)
}

// responsiveSince reports whether the node answers on both channels and
// came back after t: its Ready condition turned True after t, and its
// gossip member (if it has one) is alive. Condition times are stored with
// one-second precision, so a node back within the second of t counts: a
// fenced node that fenced itself switched on again (afterFence: on) can
// report Ready within that second.
func (d *decider) responsiveSince(t time.Time) bool {
	o := d.o
	if o.Node.Ready != ReadyTrue || o.Node.ReadySince.Before(t.Truncate(time.Second)) {
		return false
	}
	return !o.Member.Known || o.Member.State == vocab.MemberAlive || o.Member.State == vocab.MemberSuspect
}

// detect handles Healthy, Suspect and Confirming.
func (d *decider) detect() {
	o, t := d.o, d.t
	if until, ok := d.agentRestarting(); ok {
		d.awaitRestart(until)
		return
	}
	if !d.unresponsive() {
		if t.Phase != PhaseHealthy {
			if !t.suspicion.quiet {
				d.do(Action{Kind: ActEvent, EventType: "Normal", Reason: vocab.EventNodeResponsive,
					Message: "node answers again on every channel; no action taken"})
			}
			if o.Cluster.LeaseHeld {
				d.do(Action{Kind: ActReleaseLease})
			}
			d.becomeHealthy("responsive again", voided{})
			return
		}
		d.reason = "responsive"
		if d.beatsLate() {
			d.challenge()
			d.reason = "responsive, but its beats are late: asking its agent"
		}
		return
	}
	if t.Phase == PhaseHealthy && o.Node.NeverReady {
		// A node registering is not Ready yet: no suspicion, no BMC read,
		// no Warning on every node that joins.
		d.reason = "joining: not Ready since it registered"
		return
	}
	quiet := d.beatsAlone()
	if t.Phase == PhaseHealthy && quiet && !t.voided.silenceRead.IsZero() && t.voided.silenceRead.Equal(o.Member.SilentSince) {
		d.reason = "its beats stopped, but its power read on during this silence and every other channel answers: waiting for another sign"
		return
	}
	switch {
	case t.Phase == PhaseHealthy:
		d.becomeSuspect("stopped answering: "+d.channels(), nil)
		t.suspicion.quiet = quiet
		if !quiet {
			d.speakUp("")
		}
	case t.suspicion.quiet && !quiet:
		// Another channel agrees now: said as any suspicion.
		d.speakUp("")
	}
	d.seekEvidence()
}

// seekEvidence looks for evidence of a suspect node: its own word, its
// power devices, its watchdog level.
func (d *decider) seekEvidence() {
	if d.o.Watchdog.Level > 0 {
		// From the start of the suspicion: the kubelet's silence counts
		// for a fence order from here (orderBlocked).
		d.noteWatchdog()
	}
	// Evidence 2: the node announced, in its own signed word, a clean
	// shutdown of its current boot and then left the ring. No BMC needed —
	// unless too many nodes said so at once (storm guard): then only a
	// power device's reading or an operator counts.
	if ev, ok := d.cleanShutdown(); ok && !d.cleanShutdownStorm() {
		d.fenceIfStillTrue(ev)
		return
	}
	if d.waitBeforeReading() {
		return
	}
	d.confirm()
}

// waitBeforeReading keeps a suspect node from being read, and reports
// whether it did: it is shutting down cleanly, its read is held, or it has
// no BMC.
func (d *decider) waitBeforeReading() bool {
	o, t := d.o, d.t
	// A node shutting down cleanly, with its agent still in the ring, is
	// neither dead nor off: a BMC read would say on, and a power action
	// would cut the shutdown short. Wait for its announcement; waiting
	// never taints, and ShutdownWait bounds it.
	if d.shuttingDown() {
		until := t.suspicion.since.Add(d.p.ShutdownWait)
		d.becomeSuspect("shutting down: waiting for its shutdown-complete announcement", nil)
		d.notice("shutdown-wait", "Normal", vocab.EventNodeShuttingDown, fmt.Sprintf(
			"node is shutting down (%s); waiting up to %s for its agent to announce that no CSI volume is mounted and leave, before asking the BMC",
			d.shutdownSource(), d.p.ShutdownWait))
		d.requeue(until.Sub(o.Now))
		return true
	}
	if h := d.heldBy(ActReadPower); h != HoldNone {
		// Excluded: no read, so no evidence and nothing to wait for. The
		// label's removal changes the Node, which brings it back here.
		d.do(Action{Kind: ActReadPower})
		d.becomeSuspect(fmt.Sprintf("not reading its power: held (%s, label %s)", h, o.Node.Excluded), nil)
		return true
	}
	if !o.BMC.Configured && d.watchdogEngaged(false) {
		d.watchdog("; it has no power device, only its watchdog level")
		return true
	}
	if !o.BMC.Configured {
		d.becomeSuspect("no BMC in the inventory: waiting", nil)
		d.notice("no-bmc", "Warning", vocab.EventCannotConfirmPowerState,
			"node stopped answering but has no BMC in the fencer's inventory: cannot confirm it is off, so it is not tainted")
		return true
	}
	return false
}

// confirm asks a suspect node's power device, and acts on its answer.
func (d *decider) confirm() {
	o, t := d.o, d.t
	// The kubelet shows life: ask the agent together with the first read,
	// so that an off reading (of a mislabelled plug, say) meets its answer,
	// or its silence, without waiting (proofPending).
	if from := d.silenceFrom(); d.kubeletShowsLife() && o.Agent.LastSilent.Before(from) && !o.Agent.LastProof.After(from) {
		d.challenge()
	}
	r := o.BMC.Reading
	fresh := r != nil && r.At.After(t.suspicion.since) && r.At.After(t.voided.upTo)
	failedSince := o.BMC.Failure != nil && o.BMC.Failure.At.After(t.suspicion.since) &&
		(r == nil || o.BMC.Failure.At.After(r.At))

	if fresh && r.Power == vocab.PowerOff && t.suspicion.quiet {
		// Off is no false suspicion: said from here on, as any.
		d.speakUp(fmt.Sprintf(", and its %s reads off", source(r)))
	}
	switch {
	case fresh && r.Power == vocab.PowerOff && !d.guidMatches(r):
		bad := r.GUIDMismatch(o.Node.SystemUUID)
		d.becomeConfirming("BMC identity mismatch", nil)
		d.notice("guid:"+bad.SystemGUID, "Warning", vocab.EventCannotConfirmPowerState, fmt.Sprintf(
			"%s reads off, but its system GUID %s is not this node's systemUUID %s: the inventory may point at another machine; not tainting",
			source(bad), bad.SystemGUID, o.Node.SystemUUID))
		d.scheduleRead(true)
	case fresh && r.Power == vocab.PowerOff:
		d.fenceIfStillTrue(d.offEvidence(r))
	case (failedSince || !(fresh && r.Power == vocab.PowerOn)) && d.watchdogEngaged(failedSince):
		// Its power devices give nothing: its watchdog level acts, and
		// the devices are read on meanwhile (an off reading fences at
		// once, an on reading is a sign of life).
		devices := "; its power devices answer nothing"
		if f := o.BMC.Failure; failedSince {
			devices = fmt.Sprintf("; its power devices cannot be read (%s: %s)", f.Kind, f.Message)
		}
		d.watchdog(devices)
		if t.Phase == PhaseConfirming {
			d.scheduleRead(failedSince)
		}
	case o.BMC.InFlight:
		d.becomeConfirming("BMC request in flight", nil)
	case failedSince:
		f := o.BMC.Failure
		d.becomeConfirming("BMC request failed: "+string(f.Kind), nil)
		d.notice("fail:"+string(f.Kind), "Warning", vocab.EventCannotConfirmPowerState, fmt.Sprintf(
			"cannot read the power state (%s: %s); the node is not tainted until a power device says off. Retrying.", f.Kind, f.Message))
		d.scheduleRead(true)
	case fresh && r.Power == vocab.PowerOn && t.suspicion.quiet:
		d.falseSuspicion(r)
	case fresh && r.Power == vocab.PowerOn:
		d.poweredOn(r)
	default:
		d.becomeConfirming("reading the BMC", nil)
		d.scheduleRead(false)
	}
}

// speakUp says the suspicion, once: at its start, or when a quiet one
// (beatsAlone) finds another channel agreeing or its power off (what
// adds, e.g. ", and its BMC reads off").
func (d *decider) speakUp(what string) {
	o, t := d.o, d.t
	t.suspicion.quiet = false
	next := "confirming its power state before any action"
	if o.Node.Excluded != "" {
		next = "it is excluded from fencing (label " + o.Node.Excluded + "=true): fenced takes no action"
	}
	d.do(Action{Kind: ActEvent, EventType: "Warning", Reason: vocab.EventNodeSuspected,
		Message: "node stopped answering (" + d.channels() + ")" + what + "; " + next})
}

// offEvidence is the evidence of a fresh reading of off.
func (d *decider) offEvidence(r *Reading) Evidence {
	o, t := d.o, d.t
	ev := Evidence{Method: vocab.EvidenceBMCPowerOff, At: o.Now, BootID: d.bootID(), BMC: r,
		Reason: fmt.Sprintf("%s read power off at %s, after the node stopped answering (%s)",
			source(r), r.At.UTC().Format(time.RFC3339Nano), d.channels())}
	if t.voided.switchedOff != "" && t.voided.switchedOff == ev.BootID && !r.PoweredOffByFenced {
		// fenced switched this boot off before (that reading was void):
		// the fence is its power-off, as the evidence says.
		own := *r
		own.PoweredOffByFenced = true
		ev.BMC = &own
	}
	return ev
}

// scheduleRead returns ActReadPower when one is due, else a requeue for
// when it is. After a failure the delay doubles up to ReadBackoffMax.
func (d *decider) scheduleRead(afterFailure bool) {
	o, t, p := d.o, d.t, d.p
	if o.BMC.InFlight {
		return
	}
	if o.Now.Before(t.suspicion.nextRead) {
		d.requeue(t.suspicion.nextRead.Sub(o.Now))
		return
	}
	d.do(Action{Kind: ActReadPower})
	if afterFailure {
		t.suspicion.readBackoff = min(max(2*t.suspicion.readBackoff, p.ReadBackoffMin), p.ReadBackoffMax)
	} else {
		t.suspicion.readBackoff = 0
	}
	t.suspicion.nextRead = o.Now.Add(max(t.suspicion.readBackoff, p.ReadBackoffMin))
}

// cleanShutdownStorm reports whether tainting one more node on its own
// clean-shutdown word would make more than MaxUnhealthy of the nodes
// fenced that way within StormWindow. So many at once means something is
// wrong (a leaked key, a bug): raise the alarm once and take no node's
// word; power devices and operators still can fence.
func (d *decider) cleanShutdownStorm() bool {
	c, p := d.o.Cluster, d.p
	if float64(c.CleanShutdownFences+1) <= p.MaxUnhealthy*float64(c.Nodes) {
		return false
	}
	if !d.t.suspicion.stormAlarmed {
		d.t.suspicion.stormAlarmed = true
		d.do(Action{Kind: ActSafetyAlarm, EventType: "Warning", Reason: vocab.EventCleanShutdownStorm, Message: fmt.Sprintf(
			"SAFETY: %d node(s) were tainted on their own clean-shutdown announcement within %s and this one would make %d of %d, more than maxUnhealthy %.0f%%: not taking this node's word. Its power device is asked instead; an operator can run fenced confirm.",
			c.CleanShutdownFences, p.StormWindow, c.CleanShutdownFences+1, c.Nodes, 100*p.MaxUnhealthy)})
	}
	return true
}

// falseSuspicion ends a quiet suspicion (beatsAlone) whose power reads
// on: read once, said nowhere but the log and a count. Not again for this
// silence; another channel, or a new silence, starts a suspicion anew.
func (d *decider) falseSuspicion(r *Reading) {
	o, t := d.o, d.t
	keep := t.voided
	keep.silenceRead = o.Member.SilentSince
	d.do(Action{Kind: ActQuietReadOn, Message: fmt.Sprintf(
		"its beats stopped (last at %s) but its %s reads on and every other channel answers: not suspected",
		o.Member.SilentSince.UTC().Format(time.RFC3339Nano), source(r))})
	d.becomeHealthy("beats stopped, power on, every other channel answers", keep)
}

// poweredOn handles a fresh "on" reading of an unresponsive node.
func (d *decider) poweredOn(r *Reading) {
	o, t, p := d.o, d.t, d.p
	recheck := p.RecheckPoweredOn
	if p.Mode != vocab.ModePowerOff {
		d.becomeConfirming("powered on (confirm-only mode)", nil)
		d.notice("on", "Warning", vocab.EventNodeUnresponsiveButPoweredOn, fmt.Sprintf(
			"node is unresponsive but its %s reads on: it may still write to its volumes, so it is not tainted (confirm-only mode; fenced confirm or power it off to proceed)",
			source(r)))
	} else if blocked, retryIn := d.powerOffBlocked(); blocked != "" {
		d.challengeIfDue()
		d.becomeConfirming("powered on, power-off not allowed: "+blocked, nil)
		d.notice("on:"+blocked, "Warning", vocab.EventNodeUnresponsiveButPoweredOn, fmt.Sprintf(
			"node is unresponsive but its %s reads on; not switching it off: %s", source(r), blocked))
		if retryIn > 0 && retryIn < recheck {
			recheck = retryIn
		}
	} else if h := d.heldBy(ActPowerOff); h != HoldNone {
		// Reported once; challenges and reads go on, so that the node is
		// switched off at once when the hold ends.
		d.challengeIfDue()
		d.do(Action{Kind: ActPowerOff})
		d.becomeConfirming(fmt.Sprintf("powered on and unresponsive on both channels: would switch off; held (%s)", h), nil)
	} else if !o.Cluster.LeaseHeld {
		d.becomeConfirming("powered on and unresponsive: taking the power Lease", nil)
		d.do(Action{Kind: ActAcquireLease})
		d.requeue(p.ReadBackoffMin)
		return
	} else {
		d.becomePoweringOff("powered on and unresponsive on both channels: switching off")
		// Ask its agent once more during the fence delay: the switch
		// happens only if this challenge, too, goes unanswered.
		d.challenge()
		d.do(Action{Kind: ActEvent, EventType: "Warning", Reason: vocab.EventPoweringOffUnresponsiveNode, Message: fmt.Sprintf(
			"node unresponsive on both channels for %s and its BMC reads on: switching it off in %s (power-off mode)",
			p.FenceAfter, p.FenceDelay)})
		d.requeue(p.FenceDelay)
		return
	}
	if o.Cluster.LeaseHeld {
		d.do(Action{Kind: ActReleaseLease})
	}
	// Evaluate again when something may have changed: someone may switch
	// the node off, it may recover, or a power-off condition may clear.
	if next := r.At.Add(p.RecheckPoweredOn); t.suspicion.nextRead.Before(next) {
		t.suspicion.nextRead = next
	}
	if o.Now.Before(t.suspicion.nextRead) {
		d.requeue(min(t.suspicion.nextRead.Sub(o.Now), recheck))
		return
	}
	d.do(Action{Kind: ActReadPower})
	t.suspicion.nextRead = o.Now.Add(p.RecheckPoweredOn)
	d.requeue(recheck)
}

// powerOffBlocked returns why a power action is not allowed now ("" if it
// is), and, when the only obstacle is time, how long until it clears.
//
// "Unresponsive on both channels" rests only on what no other node can
// forge: the kubelet's Ready condition (written under NodeRestriction) and
// the agent's silence to this fencer's liveness challenges (sent to the
// node's address from the API; a live agent answers them whatever gossip
// says). Gossip's own dead or alive plays no part.
func (d *decider) powerOffBlocked() (string, time.Duration) {
	o, p := d.o, d.p
	a := o.Agent
	switch {
	case !o.Member.Known:
		return "the node's agent never joined the gossip ring, so it is not unresponsive on both channels", 0
	case o.Node.Ready == ReadyTrue:
		return "Kubernetes still sees the node Ready", 0
	case a.SilentSince.IsZero():
		if a.LastProof.After(d.t.suspicion.since) {
			return "its agent answers liveness challenges", 0
		}
		return "asking its agent for a proof of life", p.ChallengeInterval
	}
	waited := min(o.Now.Sub(a.SilentSince), o.Now.Sub(o.Node.ReadySince))
	if waited < p.FenceAfter {
		return fmt.Sprintf("not yet unresponsive on both channels for fenceAfter (%s)", p.FenceAfter), p.FenceAfter - waited
	}
	return d.clusterBlocked(), 0
}

// clusterBlocked returns why the state of the cluster forbids a power
// action on the node now — a switch-off or a fence order — or "": no
// quorum in gossip, a storm of unhealthy nodes, enough power actions
// running, another control-plane node down.
func (d *decider) clusterBlocked() string {
	o, p := d.o, d.p
	c := o.Cluster
	switch {
	case c.Nodes == 0 || 2*c.GossipAlive <= c.Nodes:
		return fmt.Sprintf("no quorum: this fencer sees %d of %d nodes alive in gossip", c.GossipAlive, c.Nodes)
	case float64(c.Unhealthy) > p.MaxUnhealthy*float64(c.Nodes):
		return fmt.Sprintf("storm: %d of %d nodes are down, more than maxUnhealthy %.0f%%", c.Unhealthy, c.Nodes, 100*p.MaxUnhealthy)
	case c.PowerActions >= p.MaxConcurrentPowerActions:
		return fmt.Sprintf("%d power action(s) already running (maxConcurrentPowerActions %d)", c.PowerActions, p.MaxConcurrentPowerActions)
	case o.Node.ControlPlane && c.ControlPlaneDown > 0:
		return "another control-plane node is already fenced"
	}
	return ""
}

// challengeIfDue asks the node's agent for a proof of life when the last
// answer (or silence) is older than ChallengeInterval or than the
// suspicion: only in power-off mode, where its silence is half of what a
// power action needs.
func (d *decider) challengeIfDue() {
	o, p := d.o, d.p
	if p.Mode != vocab.ModePowerOff || !o.Member.Known {
		return
	}
	d.challengeIfStale()
}

// challengeIfStale asks the node's agent for a proof of life unless it
// was asked during this suspicion less than ChallengeInterval ago: the
// watchdog level asks all along (orderBlocked, awaitReset).
func (d *decider) challengeIfStale() {
	a := d.o.Agent
	last := a.LastProof
	if a.LastSilent.After(last) {
		last = a.LastSilent
	}
	if last.After(d.t.suspicion.since) && d.o.Now.Sub(last) < d.p.ChallengeInterval {
		return
	}
	d.challenge()
}

// challenge asks the node's agent for a proof of life unless a challenge
// is waiting for its answer already. The agent of a node whose beats are
// late or stopped gets SilentChallengeTimeout to answer: it has been silent to
// this fencer for over a second already, and its silence to the challenge
// is all that keeps an off reading from being used (proofPending).
func (d *decider) challenge() {
	if !d.o.Agent.Challenging && !slices.ContainsFunc(d.actions, func(a Action) bool { return a.Kind == ActChallenge }) {
		var within time.Duration
		if m := d.o.Member; m.Silent || m.Doubt {
			within = d.p.SilentChallengeTimeout
		}
		d.do(Action{Kind: ActChallenge, Within: within})
	}
}

// poweringOff handles the PoweringOff phase.
func (d *decider) poweringOff() {
	o, t := d.o, d.t
	r := o.BMC.Reading
	if r != nil && r.PoweredOffByFenced && r.Power == vocab.PowerOff && r.At.After(t.power.from) && d.guidMatches(r) {
		d.fenceIfStillTrue(Evidence{Method: vocab.EvidenceBMCPowerOff, At: o.Now, BootID: d.bootID(), BMC: r,
			Reason: fmt.Sprintf("fenced switched the node off through %s and read power off at %s",
				source(r), r.At.UTC().Format(time.RFC3339))})
		return
	}
	if d.responsiveSince(t.suspicion.since) || o.Agent.LastProof.After(t.power.from) {
		d.do(Action{Kind: ActReleaseLease})
		d.do(Action{Kind: ActEvent, EventType: "Normal", Reason: vocab.EventPowerOffAborted,
			Message: "node answers again before it was switched off: power-off cancelled"})
		d.becomeHealthy("responsive again during fence delay", voided{})
		return
	}
	if d.powerOffStopped() {
		return
	}
	d.switchOff()
}

// powerOffStopped stops a power-off that is held, lost its Lease or
// failed, back to Confirming, and reports whether it did.
func (d *decider) powerOffStopped() bool {
	o, t, p := d.o, d.t, d.p
	if h := d.heldBy(ActPowerOff); h != HoldNone && !t.power.sent {
		// Held during the fence delay (a pause): give the Lease back
		// rather than sit on it, and look again later.
		d.do(Action{Kind: ActReleaseLease})
		d.do(Action{Kind: ActPowerOff})
		t.suspicion.nextRead = o.Now.Add(p.RecheckPoweredOn)
		d.becomeConfirming(fmt.Sprintf("power-off held (%s): not switching off", h), nil)
		d.requeue(p.RecheckPoweredOn)
		return true
	}
	if !o.Cluster.LeaseHeld {
		d.becomeConfirming("lost the power Lease: another fencer may act", nil)
		d.requeue(p.ReadBackoffMin)
		return true
	}
	if f := o.BMC.Failure; t.power.sent && !o.BMC.InFlight && f != nil && f.At.After(t.power.from) {
		d.do(Action{Kind: ActReleaseLease})
		d.do(Action{Kind: ActEvent, EventType: "Warning", Reason: vocab.EventPowerOffFailed, Message: fmt.Sprintf(
			"switching the node off failed (%s: %s); not tainted, will read the BMC again", f.Kind, f.Message)})
		t.suspicion.nextRead = o.Now.Add(max(p.ReadBackoffMin, t.suspicion.readBackoff))
		d.becomeConfirming("power-off failed", nil)
		d.requeue(t.suspicion.nextRead.Sub(o.Now))
		return true
	}
	return false
}

// switchOff waits out the fence delay, and switches the node off once its
// agent stayed silent through it and the guards still allow it.
func (d *decider) switchOff() {
	o, t, p := d.o, d.t, d.p
	if wait := t.power.from.Add(p.FenceDelay).Sub(o.Now); wait > 0 {
		d.reason = "fence delay"
		d.requeue(wait)
		return
	}
	if t.power.sent || o.BMC.InFlight {
		d.reason = "waiting for the power-off to be confirmed"
		return
	}
	// The agent must have stayed silent to a challenge sent during the
	// fence delay: a node that came back answers it.
	if !o.Agent.LastSilent.After(t.power.from) {
		d.challenge()
		d.reason = "fence delay over: waiting for the agent's answer to the last challenge"
		return
	}
	// The guards held when the fence delay started; check them again now,
	// right before the switch: quorum may be lost, a storm may have begun,
	// another fencer may have started a power action.
	if blocked, _ := d.powerOffBlocked(); blocked != "" {
		d.do(Action{Kind: ActReleaseLease})
		d.do(Action{Kind: ActEvent, EventType: "Warning", Reason: vocab.EventPowerOffAborted,
			Message: "power-off cancelled at the last moment: " + blocked})
		t.suspicion.nextRead = o.Now.Add(p.RecheckPoweredOn)
		d.becomeConfirming("power-off cancelled: "+blocked, nil)
		d.requeue(p.RecheckPoweredOn)
		return
	}
	t.power.sent = true
	d.reason = "fence delay over: switching off"
	d.do(Action{Kind: ActPowerOff})
}

// Evidence must be true when the taint lands (docs/design.md §2): a power
// reading, or a node's own announcement, is evidence only while nothing
// newer contradicts it, and a reading only while it is younger than
// MaxEvidenceAge. The fencer checks the same rule once more right before
// its write, against the freshest view (see EvidenceHolds).

// evidenceTime is when the evidence was taken: the BMC's answer, when the
// fencer saw the fence order (a sign of life after that voids watchdog
// evidence), or when the fencer saw the node's announcement.
func evidenceTime(ev *Evidence) time.Time {
	switch {
	case ev.BMC != nil:
		return ev.BMC.At
	case ev.Watchdog != nil:
		return ev.Watchdog.OrderSeenAt
	}
	return ev.At
}

// LifeAfter returns a sign of life of the node after ev was taken that no
// other node can fake, or "" when there is none: a new boot ID in the API
// or in its agent's signed announcement, an answer of its agent to a
// liveness challenge, or (for a power reading) a renewal of its kubelet's
// Lease. Gossip's own "alive" is not one (any key holder can say it); it
// only makes the fencer ask the agent (see proofPending).
func LifeAfter(ev *Evidence, o Observation) string {
	at := evidenceTime(ev)
	if why := newBoot(ev, o); why != "" {
		return why
	}
	switch {
	case o.BMC.Reading != nil && o.BMC.Reading.Power == vocab.PowerOn && o.BMC.Reading.At.After(at):
		return fmt.Sprintf("its %s reads power on at %s", source(o.BMC.Reading), o.BMC.Reading.At.UTC().Format(time.RFC3339Nano))
	case o.Agent.LastProof.After(at):
		return fmt.Sprintf("its agent answered a liveness challenge at %s", o.Agent.LastProof.UTC().Format(time.RFC3339Nano))
	case ev.BMC != nil && o.Node.KubeletRenew.After(ev.BMC.KubeletLeaseRenewedAt):
		return fmt.Sprintf("its kubelet renewed its node Lease (renew time %s) after the reading", o.Node.KubeletRenew.UTC().Format(time.RFC3339Nano))
	case ev.Watchdog != nil && o.Node.KubeletRenew.After(ev.Watchdog.KubeletLeaseRenewedAt):
		return fmt.Sprintf("its kubelet renewed its node Lease (renew time %s) after its fence order was seen", o.Node.KubeletRenew.UTC().Format(time.RFC3339Nano))
	}
	return ""
}

// lateRenewal reports whether the one sign of life LifeAfter finds is a
// renewal of the kubelet's Lease stamped, by the kubelet's clock, before
// the reading was asked for. Most likely the renewal came before the
// reading and the fencer had not seen it when it read: its informer lags
// the API server after an outage, and the reading's baseline comes from it
// when the API server cannot be asked. Such a renewal still voids the
// reading (a clock far behind could hide a real one: the safe side), but it
// is no contradiction of the device — no safety alarm, no long pause; the
// power is read again at once.
func lateRenewal(ev *Evidence, o Observation) bool {
	if ev.BMC == nil || !o.Node.KubeletRenew.After(ev.BMC.KubeletLeaseRenewedAt) {
		return false
	}
	asked := ev.BMC.SentAt
	if asked.IsZero() || ev.BMC.PoweredOffByFenced {
		// After fenced's own power-off, the off reading is when the
		// switch-off was confirmed: a node that came back to life (a hang
		// that ended) after the fence delay, just as fenced switched it
		// off, renewed its Lease until then. The reading is still void —
		// read again — but it contradicts nothing (soak seed
		// 1795470187429725287 raised a false alarm on it). A mislabelled
		// plug is caught on the next reading: the node lives on after it.
		asked = ev.BMC.At
	}
	without := o
	without.Node.KubeletRenew = ev.BMC.KubeletLeaseRenewedAt
	return LifeAfter(ev, without) == "" && o.Node.KubeletRenew.Before(asked)
}

// newBoot returns how the node is known to run another boot than the one
// ev is about, or "": it was switched off and came back, which is no
// contradiction of the evidence.
func newBoot(ev *Evidence, o Observation) string {
	switch {
	case ev.BootID != "" && o.Node.BootID != "" && o.Node.BootID != ev.BootID:
		return fmt.Sprintf("Kubernetes reports boot %s, not boot %s of the evidence", o.Node.BootID, ev.BootID)
	case ev.BootID != "" && o.Member.Signed && o.Member.State == vocab.MemberAlive && o.Member.BootID != "" && o.Member.BootID != ev.BootID:
		return fmt.Sprintf("its agent announced boot %s, signed, not boot %s of the evidence", o.Member.BootID, ev.BootID)
	}
	return ""
}

// EvidenceHolds applies the whole rule at time o.Now: no sign of life since
// ev, and a power reading no older than maxAge. It returns why not.
func EvidenceHolds(ev *Evidence, o Observation, maxAge time.Duration) (ok bool, why string) {
	if life := LifeAfter(ev, o); life != "" {
		return false, life
	}
	if ev.BMC != nil && maxAge > 0 && o.Now.Sub(ev.BMC.At) > maxAge {
		return false, fmt.Sprintf("the reading is %s old, more than %s", o.Now.Sub(ev.BMC.At).Round(time.Millisecond), maxAge)
	}
	return true, ""
}

// proofPending reports whether the node's agent must be asked before ev
// is used: a power device that reads off for a live node — a mislabelled
// outlet, another node's VM — must meet the agent's answer before any
// taint (the answer voids the reading). The agent is asked when either
//
//   - gossip says it is alive, and the agent was not silent through the
//     evidence (silentThrough: no challenge sent after it went unanswered,
//     nor one whose wait spanned it) and has not answered since (a node
//     cut off from the API server only is NotReady yet alive); or
//   - for power evidence, the kubelet shows life since the suspicion began
//     (kubeletShowsLife), whatever gossip says, and no challenge sent since
//     then went unanswered. Gossip's dead can be forged by any key holder
//     or be false under CPU starvation, and the kubelet's next renewal may
//     come seconds after the taint: its silence to a challenge is what a
//     dead node gives and a live one cannot.
//
// One unanswered challenge is enough, so forged alive messages delay a
// fence by one challenge timeout per reading at most; the challenge is sent
// together with the first read (detect), so the fast path waits for
// whichever of the two answers last.
func (d *decider) proofPending(ev *Evidence) bool {
	o, at := d.o, evidenceTime(ev)
	if o.Member.State == vocab.MemberAlive && !d.silentThrough(at) && !o.Agent.LastProof.After(at) {
		return true
	}
	return ev.BMC != nil && d.kubeletShowsLife() && !d.silentSince(d.silenceFrom())
}

// silentThrough reports whether the agent was silent at t and after: a
// challenge sent after t went unanswered, or one sent for this silence
// (since silenceFrom: when the node's beats were late) was still waiting
// at t and got no answer.
func (d *decider) silentThrough(t time.Time) bool {
	a := d.o.Agent
	return a.LastSilent.After(t) || (!a.LastSilent.IsZero() && !a.LastSilent.Before(d.silenceFrom()) && !a.SilentUntil.Before(t))
}

// kubeletShowsLife reports whether the node shows life since the
// suspicion began on a channel no gossip-key holder can forge: its Ready
// condition says True (the kubelet's own word, or its last one before it
// fell silent: only the node lifecycle controller's grace period tells
// the two apart) or its kubelet renewed its node Lease after the
// suspicion began. Both are written under NodeRestriction.
func (d *decider) kubeletShowsLife() bool {
	o := d.o
	return o.Node.Ready == ReadyTrue || o.Node.KubeletRenew.After(d.t.suspicion.since)
}

// lifeShown says which sign of life makes the agent be asked first.
func (d *decider) lifeShown() string {
	o := d.o
	var why []string
	if o.Member.State == vocab.MemberAlive {
		why = append(why, "gossip says its agent is alive")
	}
	if o.Node.Ready == ReadyTrue {
		why = append(why, "Kubernetes sees it Ready")
	}
	if o.Node.KubeletRenew.After(d.t.suspicion.since) {
		why = append(why, "its kubelet renewed its node Lease since the suspicion began")
	}
	return strings.Join(why, ", ")
}

// silentSince reports whether a liveness challenge sent at or after t went
// unanswered, and the agent has not answered one since.
func (d *decider) silentSince(t time.Time) bool {
	a := d.o.Agent
	return !a.LastSilent.IsZero() && !a.LastSilent.Before(t) && !a.LastProof.After(a.LastSilent)
}

// fenceIfStillTrue fences with ev unless the node was seen alive after it
// (the evidence is void: reported, and the reading never used again), its
// agent has to be asked first, or the reading is too old (read again).
func (d *decider) fenceIfStillTrue(ev Evidence) {
	o, t := d.o, d.t
	if life := LifeAfter(&ev, o); life != "" {
		d.void(&ev, life)
		return
	}
	if d.proofPending(&ev) {
		d.challenge()
		d.becomeConfirming("the node may be alive ("+d.lifeShown()+"): asking its agent before using the evidence", nil)
		d.requeue(d.p.ReadBackoffMin)
		return
	}
	if ok, why := EvidenceHolds(&ev, o, d.p.MaxEvidenceAge); !ok {
		// Too old (the write was held up): say so, and read again, now.
		d.notice("stale:"+evidenceTime(&ev).String(), "Warning", vocab.EventFenceEvidenceVoided, fmt.Sprintf(
			"not tainting on %s evidence taken at %s: %s; reading the power state again",
			ev.Method, evidenceTime(&ev).UTC().Format(time.RFC3339Nano), why))
		t.suspicion.nextRead = o.Now
		d.becomeConfirming("evidence too old to use: "+why+"; reading again", nil)
		d.scheduleRead(false)
		return
	}
	d.fenceWith(ev)
}

// void drops evidence that a sign of life contradicts: an Event says so,
// a contradicted reading is never used again, and the node is looked at
// afresh.
func (d *decider) void(ev *Evidence, why string) {
	o, t, p := d.o, d.t, d.p
	at := evidenceTime(ev)
	late := lateRenewal(ev, o)
	contradiction := ev.BMC != nil && ev.BMC.Power == vocab.PowerOff && newBoot(ev, o) == "" && !late
	switch {
	case ev.Watchdog != nil && d.resetContradicted(ev):
	case late:
		d.do(Action{Kind: ActEvent, EventType: "Warning", Reason: vocab.EventFenceEvidenceVoided, Message: fmt.Sprintf(
			"not tainting on %s evidence taken at %s: %s, stamped before the reading — most likely a renewal this fencer had not seen yet when it read (its view lags the API server after an outage); reading the power state again",
			ev.Method, at.UTC().Format(time.RFC3339Nano), why)})
	case contradiction && t.voided.contradicted:
		// Said once for this suspicion; the same device saying it again
		// is no news, and a stream of alarms would drown the first.
	case contradiction:
		// A power device read off a node that went on living in the same
		// boot: the device, or the plug the configuration maps to this
		// node, is not this node's (a mislabelled outlet, a VM of the same
		// name). Nothing it says about this node can be trusted until a
		// person looks.
		d.do(Action{Kind: ActSafetyAlarm, EventType: "Warning", Reason: vocab.EventPowerReadingContradicted, Message: fmt.Sprintf(
			"SAFETY: %s read power off at %s, but the node was alive after it in the same boot (%s): not tainting; check that the device and plug in the configuration really feed this node",
			source(ev.BMC), at.UTC().Format(time.RFC3339Nano), why)})
	default:
		d.do(Action{Kind: ActEvent, EventType: "Warning", Reason: vocab.EventFenceEvidenceVoided, Message: fmt.Sprintf(
			"not tainting: %s evidence taken at %s is void, the node was alive after it: %s",
			ev.Method, at.UTC().Format(time.RFC3339Nano), why)})
	}
	mem := t.voided
	if ev.BMC != nil && ev.BMC.At.After(mem.upTo) {
		mem.upTo = ev.BMC.At
	}
	if ev.BMC != nil && ev.BMC.PoweredOffByFenced && ev.BMC.Power == vocab.PowerOff && newBoot(ev, o) == "" {
		// The reading is void as evidence, but fenced did switch this
		// boot off: a later reading's fence is still fenced's power-off
		// (afterFence: on must switch it on again).
		mem.switchedOff = ev.BootID
	}
	mem.contradicted = mem.contradicted || contradiction
	if ev.Watchdog != nil {
		mem.orderSeen = ev.Watchdog.OrderSeenAt
	}
	if d.unresponsive() {
		// Still suspect: start over from a fresh reading — after the
		// longest pause when the device contradicted the node.
		s := suspicion{since: t.suspicion.since, nextRead: o.Now}
		if mem.contradicted {
			s.readBackoff, s.nextRead = p.ReadBackoffMax, o.Now.Add(p.ReadBackoffMax)
		}
		d.becomeSuspect("evidence void: "+why, &kept{suspicion: s, voided: mem})
		return
	}
	d.becomeHealthy("evidence void, the node answers: "+why, mem)
}

// fenceWith asks for the taint with evidence. The rest of the fence —
// Ready=False, the pods' force-deletion, the NodeFenced Event — follows
// once the taint is there (fenced), and is redone until done.
func (d *decider) fenceWith(ev Evidence) {
	o := d.o
	sent := d.do(Action{Kind: ActApplyTaint, Evidence: &ev})
	if o.Cluster.LeaseHeld {
		d.do(Action{Kind: ActReleaseLease})
	}
	started := &fence{evidence: &ev, taintSent: o.Now}
	if !sent {
		d.becomeFenced(fmt.Sprintf("would fence with %s evidence; held (%s)", ev.Method, d.heldBy(ActApplyTaint)), started)
		return
	}
	d.becomeFenced("fencing: "+string(ev.Method), started)
	d.requeue(TaintRetry)
}

// fenced handles Fenced and Recovering: until the taint is there, keep
// writing it while the evidence holds (writeTaint); then finish the fence
// and wait for the node to come back with a new boot (cameBack), and
// remove the taint once no attachment is left (recover).
func (d *decider) fenced() {
	t := d.t
	if !d.o.Node.TaintedByFenced && !t.fence.taintSeen {
		d.writeTaint()
		return
	}
	fence := t.fence.evidence
	if fence == nil {
		fence = &Evidence{Method: unknownMethod}
	}
	if d.cameBack(fence) {
		return
	}
	if t.Phase == PhaseRecovering {
		d.becomeFenced("no longer responsive", nil)
	}
	d.reason = "fenced: waiting for the node to come back"
	d.finishFence(fence)
}

// writeTaint handles a fence whose taint has not shown up: the write
// failed (API unreachable, a conflict) or is still on its way. It writes
// again — but only with evidence that still holds now.
func (d *decider) writeTaint() {
	o, t, p := d.o, d.t, d.p
	if t.fence.evidence == nil {
		d.becomeHealthy("no evidence to write", voided{})
		return
	}
	if h := d.heldBy(ActApplyTaint); h != HoldNone {
		// Held, not lost: nothing to write again. The evidence stands
		// while nothing contradicts it; when the hold ends (the fencer
		// looks at every node again then) the path below checks it,
		// reads again if it is too old, and writes the taint.
		if life := LifeAfter(t.fence.evidence, o); life != "" {
			d.void(t.fence.evidence, life)
			return
		}
		d.reason = fmt.Sprintf("would be fenced with %s evidence; held (%s)", t.fence.evidence.Method, h)
		return
	}
	ev, ok := d.evidenceAgain()
	if !ok {
		return
	}
	if o.Now.Sub(t.fence.taintSent) < TaintRetry && t.Since.Before(o.Now) {
		if ok, _ := EvidenceHolds(&ev, o, p.MaxEvidenceAge); ok && !d.proofPending(&ev) {
			d.reason = "waiting to see our taint on the Node"
			d.requeue(TaintRetry - o.Now.Sub(t.fence.taintSent))
			return
		}
	}
	// A new fence (fenceIfStillTrue), or back to the suspicion.
	d.fenceIfStillTrue(ev)
}

// evidenceAgain returns the evidence of a fence whose taint has not shown
// up, as it stands now. The node's own word is derived again from what
// gossip and the API show now, not replayed from memory; when it is gone,
// or a newer reading of off arrived, the suspicion starts over from here
// (ok false).
func (d *decider) evidenceAgain() (ev Evidence, ok bool) {
	o, t := d.o, d.t
	ev = *t.fence.evidence
	if ev.Method == vocab.EvidenceCleanShutdown {
		fresh, still := d.cleanShutdown()
		if !still || d.cleanShutdownStorm() {
			d.becomeSuspect("its clean-shutdown word no longer counts before its taint landed",
				&kept{suspicion: suspicion{since: t.suspicion.since, nextRead: o.Now}})
			d.detect()
			return Evidence{}, false
		}
		fresh.At = ev.At
		ev = fresh
	}
	if r := o.BMC.Reading; ev.BMC != nil && r != nil && r.At.After(ev.BMC.At) && r.Power == vocab.PowerOff && LifeAfter(&ev, o) == "" {
		// A newer reading of off: fence on that one.
		d.becomeConfirming("a newer reading of off before the taint landed",
			&kept{suspicion: suspicion{since: t.suspicion.since}, voided: voided{upTo: t.voided.upTo}})
		d.detect()
		return Evidence{}, false
	}
	return ev, true
}

// cameBack handles a fenced node that answers again, and reports whether
// it does: the safety alarm when it is back with the fenced boot, else the
// recovery.
func (d *decider) cameBack(fence *Evidence) bool {
	o, t := d.o, d.t
	// Only the member's own signed word counts here: a forged alive with
	// the fenced boot ID must not raise a false alarm.
	memberBackSameBoot := o.Member.State == vocab.MemberAlive && o.Member.Signed && o.Member.BootID != "" &&
		o.Member.BootID == fence.BootID && o.Member.Since.After(fence.At)
	// Back on a new boot: Ready with a boot ID other than the fenced one,
	// whether or not its Ready condition changed since the fence (the node
	// may have come back within the node-monitor grace period, or the fence
	// was adopted after a restart).
	backNewBoot := o.Node.Ready == ReadyTrue && o.Node.BootID != "" && fence.BootID != "" && o.Node.BootID != fence.BootID
	// The kubelet wrote Ready=True after the fence on the fenced boot:
	// whatever gossip says of its agent (a forged or false dead), the node
	// never went off. (Condition times have one-second precision, as in
	// responsiveSince.)
	kubeletBackSameBoot := o.Node.Ready == ReadyTrue && !o.Node.ReadySince.Before(fence.At.Truncate(time.Second)) &&
		o.Node.BootID != "" && o.Node.BootID == fence.BootID
	if !backNewBoot && !d.responsiveSince(fence.At) && !memberBackSameBoot && !kubeletBackSameBoot {
		return false
	}
	bootNow := d.bootID()
	switch {
	case fence.BootID != "" && bootNow == fence.BootID:
		if !t.fence.alarmed {
			t.fence.alarmed = true
			d.do(Action{Kind: ActSafetyAlarm, EventType: "Warning", Reason: vocab.EventFencedNodeBackWithSameBootID, Message: fmt.Sprintf(
				"SAFETY: node was fenced with %s evidence but answers again with the same boot ID %s: it was never off. Two writers may share its volumes. The taint stays; investigate the BMC inventory before removing it with fenced unfence --force.",
				fence.Method, bootNow)})
		}
		d.becomeFenced("back with the same boot ID: safety alarm, taint kept", nil)
	case memberBackSameBoot:
		d.becomeFenced("gossip member back with the fenced boot ID", nil)
	case bootNow == "":
		d.becomeFenced("back, but its boot ID is unknown", nil)
		d.notice("noboot", "Warning", vocab.EventCannotVerifyReboot,
			"node answers again but reports no boot ID, so fenced cannot tell it rebooted; the taint stays (remove it with fenced unfence)")
	default:
		d.recover(fence, bootNow)
	}
	return true
}

// recover removes the taint of a node back on a new boot once no
// VolumeAttachment of it is left and it is Ready (Recovery).
func (d *decider) recover(fence *Evidence, bootNow string) {
	o := d.o
	checks := Recovery(o.Node.Ready == ReadyTrue, bootNow, fence.BootID, o.Node.VolumeAttachments)
	if o.Node.VolumeAttachments > 0 {
		d.becomeRecovering("back with a new boot, VolumeAttachments left")
		d.notice("vas", "Normal", vocab.EventWaitingForVolumeAttachments, fmt.Sprintf(
			"node is back with a new boot ID; %d VolumeAttachment(s) from before remain, the taint stays until they are gone",
			o.Node.VolumeAttachments))
		return
	}
	if !Recovered(checks) {
		// Answering (its gossip member, or a Ready transition after
		// the fence) but not yet Ready on its new boot.
		d.becomeFenced("back, not yet Ready on a new boot", nil)
		return
	}
	if !o.Node.Cordon.Settled() {
		// The swap's witness is the node lifecycle controller's answer
		// to a change of the cordon; one to an earlier change, still
		// pending, would be taken for it (returning.go).
		d.becomeRecovering("back with a new boot: waiting for the node lifecycle controller to settle the cordon before the taint comes off")
		d.notice("unsettled", "Normal", vocab.EventWaitingForControllerManager,
			"node is back with a new boot ID; the out-of-service taint comes off once the node lifecycle controller has answered the last change of the node's cordon")
		return
	}
	if !d.do(Action{Kind: ActRemoveTaint, Message: fmt.Sprintf("node is back: Ready with new boot ID %s (fenced at boot %s), no VolumeAttachment left", bootNow, fence.BootID)}) {
		d.becomeRecovering(fmt.Sprintf("back with a new boot: would remove the taint; held (%s)", d.heldBy(ActRemoveTaint)))
		return
	}
	d.becomeReturning("back with a new boot: out-of-service taint swapped for the returning taint until the controller-manager has observed that")
	d.requeue(ReturnPatience)
}

// finishFence does the rest of the fence, redone until done: after an API
// outage or a fencer restart nothing of it is lost. (A held step is
// reported once and not redone: nothing to retry.)
func (d *decider) finishFence(fence *Evidence) {
	o, t, p := d.o, d.t, d.p
	done := true
	// Ready=True (or no condition) keeps the pod GC from acting on the
	// taint; False and Unknown both mean not ready, and the node lifecycle
	// controller turns False into Unknown after every write once the
	// kubelet is silent, so Unknown is left alone (no write war).
	if o.Node.Ready != ReadyFalse && o.Node.Ready != ReadyUnknown && d.do(Action{Kind: ActMarkNotReady}) {
		done = false
	}
	if p.ForceDeletePods && !o.Node.PodsForceDeleted && d.do(Action{Kind: ActForceDeletePods}) {
		done = false
	}
	if !done {
		d.requeue(TaintRetry)
	}
	if p.PowerOnAfterFence && fence.BMC != nil && fence.BMC.PoweredOffByFenced && !t.fence.poweredOnSent &&
		o.Node.VolumeAttachments == 0 && !o.BMC.InFlight && d.do(Action{Kind: ActPowerOn}) {
		t.fence.poweredOnSent = true
		d.do(Action{Kind: ActEvent, EventType: "Normal", Reason: vocab.EventPoweringOnAfterFence,
			Message: "volumes released: switching the node on again (afterFence: on)"})
	}
}

// KubeletSilent is how long a kubelet may go without renewing its node
// Lease and still count as running while its agent restarts
// (agentRestarting): two and a half of its renewals (every 10 s by
// default), so that one late renewal is no alarm.
const KubeletSilent = 25 * time.Second

// agentRestarting returns until when a node whose agent is away for a
// restart is left alone, and whether it is now: its agent announced, in
// its own signed word for the node's current boot, that it restarts, and
// left the ring; the kubelet — the channel no gossip-key holder can forge —
// still says Ready and has renewed its Lease within KubeletSilent (when
// its Lease is known); and RestartWait since the leave has not passed.
// A node that dies meanwhile stops renewing: it is suspected KubeletSilent
// after its last renewal at the latest. Only a delay can come of this, as
// of a forged gossip alive; no evidence rests on it.
func (d *decider) agentRestarting() (until time.Time, ok bool) {
	o, p := d.o, d.p
	m, n := o.Member, o.Node
	if p.RestartWait <= 0 || !m.Known || !m.Signed || m.State != vocab.MemberLeft || m.Announced != vocab.AnnounceRestarting {
		return time.Time{}, false
	}
	if m.BootID == "" || m.BootID != n.BootID || n.Ready != ReadyTrue {
		return time.Time{}, false
	}
	if !n.KubeletRenew.IsZero() && o.Now.Sub(n.KubeletRenew) > KubeletSilent {
		return time.Time{}, false
	}
	until = m.Since.Add(p.RestartWait)
	return until, o.Now.Before(until)
}

// awaitRestart leaves a node alone whose agent restarts
// (agentRestarting): no suspicion, no read, no Warning — a rollout
// restarts every agent, and each would otherwise cost a power read and two
// Warnings. A suspicion under way ends: the kubelet answers, and the agent
// said why it is away. The node is looked at again when the wait ends.
func (d *decider) awaitRestart(until time.Time) {
	if d.t.Phase != PhaseHealthy {
		d.do(Action{Kind: ActEvent, EventType: "Normal", Reason: vocab.EventNodeResponsive,
			Message: "its kubelet is Ready and its agent left the ring for a restart, in its own signed word; no action taken"})
		d.becomeHealthy("agent restarting, kubelet Ready", voided{})
	}
	d.reason = "agent restarting (its own signed word), kubelet Ready: waiting until " + until.UTC().Format(time.RFC3339) + " for it to rejoin"
	d.requeue(until.Sub(d.o.Now))
}

// shuttingDown reports whether the node is in a clean shutdown that is
// still going on: its agent is in the ring and it (or its kubelet) said
// so, and ShutdownWait since the suspicion began has not passed.
func (d *decider) shuttingDown() bool {
	o := d.o
	if d.p.ShutdownWait <= 0 || !o.Member.Known || (o.Member.State != vocab.MemberAlive && o.Member.State != vocab.MemberSuspect) {
		return false
	}
	if !o.Member.announcedShutdown() && !o.Node.ShuttingDown {
		return false
	}
	return o.Now.Before(d.t.suspicion.since.Add(d.p.ShutdownWait))
}

// shutdownSource says who reported the shutdown.
func (d *decider) shutdownSource() string {
	if d.o.Member.announcedShutdown() {
		return "its agent announced " + string(d.o.Member.Announced)
	}
	return "its kubelet reports it"
}

// announcedShutdown reports whether the member's agent announced, in its
// own signed word, that its host is shutting down (or has finished with
// its volumes). An unsigned announcement could be anyone's: it would hold
// back the BMC read for ShutdownWait, so it counts for nothing.
func (m MemberObs) announcedShutdown() bool {
	return m.Signed && m.Announced.Shutdown()
}

// cleanShutdown returns clean-shutdown evidence when the member announced
// shutdown-complete for the node's current boot and has left the ring.
func (d *decider) cleanShutdown() (Evidence, bool) {
	m, n := d.o.Member, d.o.Node
	if !m.Known || !m.Signed || m.State != vocab.MemberLeft || m.Announced != vocab.AnnounceShutdownComplete || m.BootID == "" {
		return Evidence{}, false
	}
	// The announcement must be about the boot the API knows; an old
	// announcement of an earlier boot proves nothing about this one.
	if n.BootID != "" && n.BootID != m.BootID {
		return Evidence{}, false
	}
	return Evidence{Method: vocab.EvidenceCleanShutdown, At: d.o.Now, BootID: m.BootID,
		Reason: fmt.Sprintf("node announced shutdown-complete (no CSI volume mounted) for boot %s, signed with its own key, and left the ring at %s",
			m.BootID, m.Since.UTC().Format(time.RFC3339))}, true
}

// guidMatches applies the identity check "when known": a reading without
// a GUID, or a node without a systemUUID, passes.
func (d *decider) guidMatches(r *Reading) bool {
	return r.GUIDMismatch(d.o.Node.SystemUUID) == nil
}

// source names where a reading comes from in messages: "BMC <endpoint>",
// or "fencing level N (device:plug, ...)" for a level of several devices.
func source(r *Reading) string {
	if r.Level > 0 {
		return "fencing " + r.Endpoint
	}
	if r.Device != "" && r.Device != vocab.DeviceBMC {
		return "power device " + r.Endpoint
	}
	return "BMC " + r.Endpoint
}

// bootID is the node's current boot ID: the API's, else the member's.
func (d *decider) bootID() string {
	if d.o.Node.BootID != "" {
		return d.o.Node.BootID
	}
	return d.o.Member.BootID
}

// channels describes which channels say the node is gone.
func (d *decider) channels() string {
	var c []string
	if d.o.Node.Ready != ReadyTrue {
		c = append(c, "Kubernetes Ready="+string(d.o.Node.Ready))
	}
	if d.o.Member.Silent {
		c = append(c, "beats stopped")
	}
	if m := d.o.Member; m.State.Gone() {
		g := "gossip " + string(m.State)
		if m.State == vocab.MemberLeft && m.Signed && m.Announced == vocab.AnnounceRestarting {
			g += fmt.Sprintf(" for a restart %s ago, not back", d.o.Now.Sub(m.Since).Round(time.Second))
		}
		c = append(c, g)
	}
	if d.aliveUnbacked() {
		c = append(c, "gossip alive, but its agent does not answer challenges")
	}
	return strings.Join(c, ", ")
}
