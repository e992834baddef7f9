package core

import (
	"slices"
	"time"
)

// The state machine's transitions, in the style of etcd raft's
// becomeFollower / becomeCandidate / becomeLeader: one become<Phase> per
// phase owns which fields of the Target survive the move into it, and
// nothing else assigns the phase or resets the target (TestTransitionsStayInBecome
// checks both). Every phase change is checked against allowed, the table
// of transitions, and recorded in the Decision.
//
// A transition missing from the table is a bug in this package, and it is
// recorded, not refused with a panic. The actions of the step were already
// decided for the new phase: a target held back in its old phase while
// they go out (a taint written from Confirming, say) is a state nobody
// designed; and a panic would stop the fencer for every node, over and
// over, since the state rebuilt from the Node's taint meets the same bug
// on the same observation. So the move is made, the Decision carries it
// (Transition.Allowed is false), the fencer logs it as an error, and the
// random walk (TestRandomWalkKeepsTheInvariant) fails on it.

// allowed is the table of transitions: from a phase, the phases a single
// become* may move a target to. Staying in a phase is not a transition.
var allowed = map[Phase][]Phase{
	// A new suspicion; a fence adopted from the Node's taint; a returning
	// taint adopted.
	PhaseHealthy: {PhaseSuspect, PhaseFenced, PhaseReturning},
	// Back (cleared, or the evidence was voided); asking the BMC; the
	// reading was on and the Lease is already held; fenced on the node's
	// own clean-shutdown word or on an adopted taint.
	PhaseSuspect: {PhaseHealthy, PhaseConfirming, PhasePoweringOff, PhaseFenced},
	// Back; waiting again (shutting down, held, no BMC); switching off;
	// fenced on a reading, a clean shutdown or an adopted taint.
	PhaseConfirming: {PhaseHealthy, PhaseSuspect, PhasePoweringOff, PhaseFenced},
	// Aborted because the node answers; held, cancelled, failed or the
	// Lease lost; the evidence was voided while still unresponsive; fenced.
	PhasePoweringOff: {PhaseHealthy, PhaseSuspect, PhaseConfirming, PhaseFenced},
	// Unfenced from outside; the taint never landed and the evidence is
	// derived again (Suspect, Confirming) or voided; back on a new boot,
	// waiting (Recovering) or swapped (Returning).
	PhaseFenced: {PhaseHealthy, PhaseSuspect, PhaseConfirming, PhaseRecovering, PhaseReturning},
	// Unfenced from outside; no longer responsive, or not Ready yet;
	// swapped.
	PhaseRecovering: {PhaseHealthy, PhaseFenced, PhaseReturning},
	// Lifted, or the record gone; the out-of-service taint back (the swap
	// did not land, or a new fence).
	PhaseReturning: {PhaseHealthy, PhaseFenced},
}

// Transition is one phase change within a Step.
type Transition struct {
	From, To Phase
}

// Allowed reports whether the table of transitions has tr.
func (tr Transition) Allowed() bool { return slices.Contains(allowed[tr.From], tr.To) }

// suspicion is the state of one suspicion, from Suspect until the fence:
// when it began, the pace of the power reads, and whether the
// clean-shutdown storm alarm was raised for it. A fence keeps it (its
// evidence may have to be derived again before the taint lands).
type suspicion struct {
	since       time.Time
	nextRead    time.Time
	readBackoff time.Duration
	// stormAlarmed: the clean-shutdown storm alarm was raised.
	stormAlarmed bool
	// quiet: the node's beats alone stopped (beatsAlone); the suspicion
	// says nothing until another channel agrees.
	quiet bool
	// watchdog is the watchdog level's state (watchdoglevel.go).
	watchdog watchdogLevel
}

// voided is what evidence that a sign of life contradicted leaves behind.
// It outlives the suspicion it was voided in: a node that answered again
// keeps it when it is suspected anew.
type voided struct {
	// upTo: power readings up to this answer time were contradicted by a
	// sign of life and are no evidence.
	upTo time.Time
	// contradicted: a power device read off while the node lived on in
	// the same boot; the alarm was raised once, and the device is read at
	// the slowest pace from then on.
	contradicted bool
	// switchedOff is the boot ID fenced switched off in power-off mode
	// when that reading was void (the node lived until the switch-off): a
	// fence of the same boot on a later reading is still its power-off.
	switchedOff string
	// silenceRead is when the last beat came of the silence whose power
	// read on while every other channel answered (falseSuspicion): that silence
	// is no reason to read again.
	silenceRead time.Time
	// orderSeen is when the fence order was first seen whose watchdog
	// evidence a sign of life voided: that order is no evidence any more
	// (the node resets when its agent reads it, and is then back in
	// another boot).
	orderSeen time.Time
}

// powerOff is the PoweringOff phase's state; it exists only there.
type powerOff struct {
	// from is when the phase began (the fence delay counts from it).
	from time.Time
	// sent: ActPowerOff went out.
	sent bool
}

// fence is the Fenced and Recovering phases' state; it exists only there.
type fence struct {
	evidence *Evidence
	// taintSent is when ApplyTaint was last returned; taintSeen, that the
	// taint has been observed on the Node since.
	taintSent time.Time
	taintSeen bool
	// alarmed: the node came back with the fenced boot ID; the safety
	// alarm was raised.
	alarmed bool
	// poweredOnSent: ActPowerOn went out (afterFence: on).
	poweredOnSent bool
	// unreadable: the fence is a newer fenced's, its evidence in a format
	// this one does not read (leaveToNewerFenced); evidence is nil.
	unreadable bool
}

// reports dedupes what the core tells people about one suspicion.
type reports struct {
	// lastNotice: one Event per distinct situation (decider.notice).
	lastNotice string
	// held: the ActHeld reports sent (by Event reason), each sent once.
	held map[string]bool
}

// become is the one place the phase changes: it checks and records the
// transition, dates the phase, and drops the sub-state of a phase left.
// It is the primitive of the become<Phase> functions below; call them.
func (d *decider) become(to Phase, reason string) {
	t := d.t
	if from := t.phase(); from != to {
		d.transitions = append(d.transitions, Transition{From: from, To: to})
	}
	if t.Phase != to {
		t.Phase, t.Since = to, d.o.Now
	}
	if to != PhasePoweringOff {
		t.power = powerOff{}
	}
	if to != PhaseFenced && to != PhaseRecovering {
		t.fence = fence{}
	}
	d.reason = reason
}

// phase is the target's phase; the zero Target is Healthy.
func (t *Target) phase() Phase {
	if t.Phase == "" {
		return PhaseHealthy
	}
	return t.Phase
}

// becomeHealthy starts over: nothing of the target survives but its name
// and what voided evidence taught (keep; zero unless the node answered
// after evidence of it was voided).
func (d *decider) becomeHealthy(reason string, keep voided) {
	d.become(PhaseHealthy, reason)
	t := d.t
	*t = Target{Name: t.Name, Phase: PhaseHealthy, Since: d.o.Now, voided: keep}
}

// becomeSuspect moves the target to Suspect. With restart, the suspicion
// starts over keeping only restart's suspicion and voided memory (the
// evidence was voided, or the clean-shutdown word was gone before its
// taint landed). Without it, from Healthy a new suspicion begins now,
// keeping only what voided evidence taught; from a later phase the
// suspicion goes on, every field surviving.
func (d *decider) becomeSuspect(reason string, restart *kept) {
	t := d.t
	if restart == nil && t.phase() == PhaseHealthy {
		restart = &kept{suspicion: suspicion{since: d.o.Now, nextRead: d.o.Now}, voided: t.voided}
	}
	d.become(PhaseSuspect, reason)
	if restart != nil {
		*t = Target{Name: t.Name, Phase: PhaseSuspect, Since: d.o.Now, suspicion: restart.suspicion, voided: restart.voided}
	}
}

// kept is what a suspicion that starts over keeps.
type kept struct {
	suspicion suspicion
	voided    voided
}

// becomeConfirming moves the target to Confirming: the suspicion goes on
// (restart nil), or starts over keeping only restart's (a newer reading of
// off arrived before the taint landed).
func (d *decider) becomeConfirming(reason string, restart *kept) {
	d.become(PhaseConfirming, reason)
	if t := d.t; restart != nil {
		*t = Target{Name: t.Name, Phase: PhaseConfirming, Since: d.o.Now, suspicion: restart.suspicion, voided: restart.voided}
	}
}

// becomePoweringOff starts the fence delay now; the suspicion survives.
func (d *decider) becomePoweringOff(reason string) {
	d.become(PhasePoweringOff, reason)
	d.t.power = powerOff{from: d.o.Now}
}

// becomeFenced moves the target to Fenced. With f, a new fence begins
// (its taint written now, or adopted from the Node), dated now even when
// it replaces one that never landed; the suspicion survives, for a fence
// whose evidence must be derived again. Without f the fence goes on.
func (d *decider) becomeFenced(reason string, f *fence) {
	d.become(PhaseFenced, reason)
	if f != nil {
		d.t.fence, d.t.Since = *f, d.o.Now
	}
}

// becomeRecovering: the fenced node is back on a new boot; the fence
// goes on until its taint is removed.
func (d *decider) becomeRecovering(reason string) {
	d.become(PhaseRecovering, reason)
}

// becomeReturning: the fence is over, its taint swapped for the returning
// taint, whose record lives on the Node (returning.go). Nothing of the
// target survives but its name: a suspicion after the lift starts afresh.
func (d *decider) becomeReturning(reason string) {
	d.become(PhaseReturning, reason)
	t := d.t
	*t = Target{Name: t.Name, Phase: PhaseReturning, Since: d.o.Now}
}
