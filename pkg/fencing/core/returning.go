package core

import (
	"fmt"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// The way back from a fence (docs/design.md §5, "Taking the taint off").
//
// The pod garbage collector and the attach/detach controller read the
// out-of-service taint from the controller-manager's informer cache, not
// from the API server. Were fenced to take the taint off in one write, a
// controller-manager whose cache lags would go on seeing the taint on a
// node that runs again: the attach/detach controller would detach, without
// the check that the volume is unmounted, the volume of a pod that has
// just landed there and is being stopped; the pod garbage collector would
// force-delete such a pod while its containers still run. So the taint
// comes off in three steps, each one write of pkg/taint:
//
//  1. The swap (ActRemoveTaint, taint.Tainter.Remove): in one update, the
//     out-of-service taint comes off, fenced's own taint fenced.io/returning
//     (NoExecute: the scheduler places nothing there, and a kubelet admits
//     no pod that does not tolerate it, even one bound by spec.nodeName)
//     goes on, the record Returning goes in an annotation, and the cordon
//     changes (the probe, below). No version of the Node lacks both taints.
//  2. The witness: the controller-manager's node lifecycle controller
//     answers the change of spec.unschedulable by adding or removing its
//     taint node.kubernetes.io/unschedulable:NoSchedule. It decides from
//     its informer's copy of the Node, and that informer is the one the
//     pod garbage collector and the attach/detach controller read (the
//     controller-manager's shared informer factory builds one Node informer
//     per process). An informer's copy only moves forward. So once that
//     taint has changed since the swap (Returning.Observed), the copy the
//     two controllers read is the swap's version or a later one: the
//     out-of-service taint is gone from it for good.
//  3. The lift (ActLiftReturning, taint.Tainter.Lift): fenced's taint
//     comes off, and the cordon fenced set, if it is still there.
//
// No clock says when the controller-manager has caught up: a lagging one
// lags for as long as it lags. Only its own answer does.

// Returning is fenced's record, on the Node, of a swap: pkg/taint stores
// it as JSON with these tags in the annotation fenced.io/returning, next
// to fenced's taint fenced.io/returning, and the core reads it back.
type Returning struct {
	// At is when the out-of-service taint came off (or when the probe was
	// made again).
	At time.Time `json:"at"`
	// By is who took it off: a fencer, or `fenced unfence`.
	By string `json:"by"`
	// Cordoned: the cordon (spec.unschedulable) is fenced's own, set by a
	// probe; the lift takes it off again.
	Cordoned bool `json:"cordoned"`
	// UnschedulableTaint is whether the node lifecycle controller's taint
	// node.kubernetes.io/unschedulable was on the Node the swap replaced:
	// the baseline against which its answer is seen.
	UnschedulableTaint bool `json:"unschedulableTaint"`
}

// Cordon is what a Node says of its cordon.
type Cordon struct {
	// Unschedulable is spec.unschedulable: the node is cordoned.
	Unschedulable bool
	// Taint: the node lifecycle controller's taint
	// node.kubernetes.io/unschedulable:NoSchedule is on the Node.
	Taint bool
}

// Settled reports whether the node lifecycle controller's taint agrees
// with the cordon, so that the next change of the cordon gets an answer
// that can be told apart. A swap is made only on a settled cordon: while
// the controller has not answered an earlier change, its answer to that
// one would look like an answer to the swap.
func (c Cordon) Settled() bool { return c.Unschedulable == c.Taint }

// Probe returns the cordon a swap writes on the settled cordon c, given
// fenced's record before it (nil when there is none), and whether that
// cordon is fenced's own:
//   - not cordoned: fenced cordons the node, the controller will add its
//     taint;
//   - cordoned by fenced (an earlier probe): fenced uncordons it, the
//     controller will remove its taint;
//   - cordoned by someone else: fenced leaves that cordon alone and waits
//     for theirs to be lifted, which the controller answers the same way.
func Probe(c Cordon, before *Returning) (unschedulable, fencedCordon bool) {
	switch {
	case !c.Unschedulable:
		return true, true
	case before != nil && before.Cordoned:
		return false, false
	}
	return true, false
}

// Observed reports whether the node lifecycle controller has answered a
// change of the cordon made by the swap or after it: its taint is not what
// it was when the swap was written. Then the controller-manager's Node
// informer holds the swap's version of the Node or a later one.
func (r Returning) Observed(c Cordon) bool { return c.Taint != r.UnschedulableTaint }

// ProbeLost reports whether the change the controller must answer has been
// undone before it answered: the cordon is back where it was at the swap,
// settled, and fenced may change it again (it is not someone else's).
// Fenced then makes the probe again.
func (r Returning) ProbeLost(c Cordon) bool {
	atBaseline := c.Taint == r.UnschedulableTaint && c.Unschedulable == r.UnschedulableTaint
	return atBaseline && (!c.Unschedulable || r.Cordoned)
}

// ForeignCordon reports whether the node is cordoned by someone else since
// before the swap and nothing has been observed yet: fenced's taint stays
// until that cordon is lifted.
func (r Returning) ForeignCordon(c Cordon) bool {
	return !r.Cordoned && c.Unschedulable && !r.Observed(c)
}

// ReturnPatience is how long after a swap the core waits for the
// controller-manager's answer before it says, in a Warning Event, that it
// is still waiting. It decides nothing: the returning taint stays until the
// answer comes, however long that takes.
const ReturnPatience = time.Minute

// returning handles the Returning phase: lift fenced's taint once the
// controller-manager has observed the swap, make the probe again if it was
// undone, and otherwise wait.
func (d *decider) returning() {
	o := d.o
	r := o.Node.Returning
	if r == nil {
		// Lifted (by another fencer, or `fenced unfence --force`), or
		// removed by hand.
		d.becomeHealthy("fenced's returning record is gone", voided{})
		return
	}
	c := o.Node.Cordon
	if r.Observed(c) {
		msg := fmt.Sprintf("the controller-manager has observed the removal of the out-of-service taint (%s ago): its node lifecycle controller answered the cordon", o.Now.Sub(r.At).Round(time.Millisecond))
		if !d.do(Action{Kind: ActLiftReturning, Message: msg}) {
			d.reason = fmt.Sprintf("returned: would lift the returning taint; held (%s)", d.heldBy(ActLiftReturning))
			return
		}
		d.do(Action{Kind: ActEvent, EventType: "Normal", Reason: vocab.EventNodeRecovered, Message: "node is back with a new boot ID; out-of-service taint removed, and the controller-manager has observed that"})
		d.becomeHealthy("recovered", voided{})
		return
	}
	if r.ProbeLost(c) {
		d.do(Action{Kind: ActRemoveTaint, Message: "the cordon change the controller-manager must answer was undone before it answered: making it again"})
	}
	d.waitForControllerManager(r, c)
}

// waitForControllerManager says why the returning taint stays: at once for
// a cordon of someone else's, after ReturnPatience for a controller-manager
// that does not answer.
func (d *decider) waitForControllerManager(r *Returning, c Cordon) {
	o := d.o
	d.reason = "returning: waiting for the controller-manager to observe the removal of the out-of-service taint"
	if r.ForeignCordon(c) {
		d.reason = "returning: the node is cordoned by someone else; the returning taint stays until it is uncordoned"
		d.notice("foreign-cordon", "Normal", vocab.EventWaitingForControllerManager,
			"the out-of-service taint is off, but the node was already cordoned, so fenced cannot ask the controller-manager whether it saw that; fenced.io/returning stays until the node is uncordoned")
		return
	}
	waited := o.Now.Sub(r.At)
	if waited < ReturnPatience {
		d.requeue(ReturnPatience - waited)
		return
	}
	d.notice("patience", "Warning", vocab.EventWaitingForControllerManager, fmt.Sprintf(
		"the out-of-service taint came off %s ago, and the controller-manager has not yet answered the last change of the node's cordon: it is down, lagging, or runs without its node lifecycle controller. fenced.io/returning stays until it answers (fenced unfence --force lifts it)",
		waited.Round(time.Second)))
}
