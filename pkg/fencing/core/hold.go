package core

import (
	"fmt"

	"fenced.io/fenced/pkg/vocab"
)

// The operator's three switches — policy.dryRun, a node's exclusion label
// and the cluster-wide pause — hold back what the fencer does, never what
// the core decides. They live here, in the core, and not only in the
// fencer's executor, for two reasons:
//
//   - One rule, one place: HeldBy says which action each switch holds, and
//     decider.do — the one funnel every action of every rule passes — applies
//     it. No decision rule is copied or changed, so a dry-run reports exactly
//     what a real run would do, with the same evidence.
//   - A held effect changes what comes next, and only the core knows what
//     that is: a taint that was never written is not a failed write to be
//     retried every TaintRetry (with a FenceEvidenceVoided Event each time
//     the reading ages), a power-off that was never sent must not leave the
//     power Lease taken, and an excluded node must not be asked for a read
//     every second. An executor that swallowed the actions would have to
//     copy the core's retry rules to stop those loops.
//
// A held action leaves as ActHeld, once per suspicion and kind, so that a
// node that "would be tainted" for an hour gets one Event, not one every
// few seconds. The fencer applies HeldBy once more right before it carries
// out an effect (a pause can land between a decision and its execution).

// Hold says what holds an action back.
type Hold string

// Holds, from the narrowest to the widest.
const (
	// HoldNone: the action goes out.
	HoldNone Hold = ""
	// HoldExcluded: the node carries an exclusion label (NodeObs.Excluded):
	// no power read, no taint, no power action for it.
	HoldExcluded Hold = "Excluded"
	// HoldPaused: the cluster-wide pause is on (ClusterObs.Paused): no
	// Node write and no power action; reads go on, so that resuming acts at
	// once.
	HoldPaused Hold = "Paused"
	// HoldDryRun: policy.dryRun: the fencer decides and reports everything
	// and changes nothing.
	HoldDryRun Hold = "DryRun"
)

// effect reports whether k changes a Node, its pods or its power: what the
// switches hold. (Reads, challenges, Lease releases, Events and alarms
// change nothing that a switch is about.)
func effect(k ActionKind) bool {
	switch k {
	case ActApplyTaint, ActRemoveTaint, ActLiftReturning, ActMarkNotReady, ActForceDeletePods, ActAcquireLease, ActPowerOff, ActPowerOn, ActOrderReset:
		return true
	}
	return false
}

// HeldBy returns what holds action k back for the node observed in o under
// p, or HoldNone. It is the whole rule of the three switches:
//
//   - an excluded node is never read, tainted, marked, emptied or switched
//     on or off — only fenced's own taints may still come off when the node
//     is back on a new boot, the out-of-service taint and then the
//     returning taint (that ends a fence, it does not act on the node;
//     keeping them would keep its workloads away for nothing);
//   - while paused, and in dry-run, every effect is held, removing a taint
//     included: the Nodes stay exactly as they are.
func HeldBy(k ActionKind, o Observation, p Policy) Hold {
	excluded := o.Node.Excluded != ""
	switch {
	case excluded && (k == ActReadPower || effect(k) && k != ActRemoveTaint && k != ActLiftReturning):
		return HoldExcluded
	case !effect(k):
		return HoldNone
	case o.Cluster.Paused:
		return HoldPaused
	case p.DryRun:
		return HoldDryRun
	}
	return HoldNone
}

// Would is the verb a held action is reported with, in its Event reason
// (Hold + "Would" + verb, e.g. DryRunWouldTaint, PausedWouldPowerOff,
// ExcludedWouldReadPower).
func Would(k ActionKind) string {
	switch k {
	case ActApplyTaint:
		return "Taint"
	case ActRemoveTaint:
		return "RemoveTaint"
	case ActLiftReturning:
		return "LiftReturning"
	case ActMarkNotReady:
		return "MarkNotReady"
	case ActForceDeletePods:
		return "DeletePods"
	case ActAcquireLease, ActPowerOff, ActOrderReset:
		// The power Lease is taken only to switch the node off, or to
		// order its watchdog to: a fence order ends in a reset.
		return "PowerOff"
	case ActPowerOn:
		return "PowerOn"
	case ActReadPower:
		return "ReadPower"
	}
	return string(k)
}

// HeldReason is the Event reason of action k held back by h: the switch,
// "Would" and the verb (Would), declared in pkg/vocab's catalogue like
// every Event reason. TestHeldBy checks that every pair HeldBy can return
// has its reason.
func HeldReason(h Hold, k ActionKind) vocab.EventReason { return heldReasons[h][Would(k)] }

// heldReasons is HeldReason's table: by switch, then by verb.
var heldReasons = map[Hold]map[string]vocab.EventReason{
	HoldDryRun: {
		"Taint":        vocab.EventDryRunWouldTaint,
		"RemoveTaint":  vocab.EventDryRunWouldRemoveTaint,
		"MarkNotReady": vocab.EventDryRunWouldMarkNotReady,
		"DeletePods":   vocab.EventDryRunWouldDeletePods,
		"PowerOff":     vocab.EventDryRunWouldPowerOff,
		"PowerOn":      vocab.EventDryRunWouldPowerOn,

		"LiftReturning": vocab.EventDryRunWouldLiftReturning,
	},
	HoldPaused: {
		"Taint":        vocab.EventPausedWouldTaint,
		"RemoveTaint":  vocab.EventPausedWouldRemoveTaint,
		"MarkNotReady": vocab.EventPausedWouldMarkNotReady,
		"DeletePods":   vocab.EventPausedWouldDeletePods,
		"PowerOff":     vocab.EventPausedWouldPowerOff,
		"PowerOn":      vocab.EventPausedWouldPowerOn,

		"LiftReturning": vocab.EventPausedWouldLiftReturning,
	},
	HoldExcluded: {
		"ReadPower":    vocab.EventExcludedWouldReadPower,
		"Taint":        vocab.EventExcludedWouldTaint,
		"MarkNotReady": vocab.EventExcludedWouldMarkNotReady,
		"DeletePods":   vocab.EventExcludedWouldDeletePods,
		"PowerOff":     vocab.EventExcludedWouldPowerOff,
		"PowerOn":      vocab.EventExcludedWouldPowerOn,
	},
}

// heldBy applies HeldBy to this decision.
func (d *decider) heldBy(k ActionKind) Hold { return HeldBy(k, d.o, d.p) }

// hold reports a held action as ActHeld, once per suspicion, hold and kind.
func (d *decider) hold(h Hold, a Action) {
	t := d.t
	reason := HeldReason(h, a.Kind)
	key := string(reason)
	if t.reports.held[key] {
		return
	}
	if t.reports.held == nil {
		t.reports.held = map[string]bool{}
	}
	t.reports.held[key] = true
	d.actions = append(d.actions, Action{Kind: ActHeld, Held: a.Kind, Hold: h, Evidence: a.Evidence,
		EventType: "Normal", Reason: reason, Message: d.holdPrefix(h) + d.wouldDo(a)})
}

// holdPrefix says which switch holds an action.
func (d *decider) holdPrefix(h Hold) string {
	switch h {
	case HoldExcluded:
		return fmt.Sprintf("excluded from fencing by label %s=true, so fenced does not read its power, taint it or switch it off: ", d.o.Node.Excluded)
	case HoldPaused:
		if r := d.o.Cluster.PauseReason; r != "" {
			return fmt.Sprintf("fencing is paused cluster-wide (%s): ", r)
		}
		return "fencing is paused cluster-wide: "
	case HoldDryRun:
		return "dry-run: "
	}
	return ""
}

// wouldDo says what a held action would have done.
func (d *decider) wouldDo(a Action) string {
	n := d.t.Name
	switch a.Kind {
	case ActApplyTaint:
		if ev := a.Evidence; ev != nil {
			then := "mark it NotReady"
			if d.p.ForceDeletePods {
				then += " and force-delete its pods"
			}
			return fmt.Sprintf("would taint %s out-of-service with %s evidence: %s; then %s", n, ev.Method, ev.Reason, then)
		}
		return fmt.Sprintf("would taint %s out-of-service", n)
	case ActRemoveTaint:
		return fmt.Sprintf("would remove the out-of-service taint from %s, with fenced's returning taint in its place until the controller-manager has observed that: %s", n, a.Message)
	case ActLiftReturning:
		return fmt.Sprintf("would lift fenced's returning taint from %s: %s", n, a.Message)
	case ActMarkNotReady:
		return fmt.Sprintf("would mark %s NotReady (reason PoweredOff)", n)
	case ActForceDeletePods:
		return fmt.Sprintf("would force-delete the pods of %s", n)
	case ActAcquireLease, ActPowerOff:
		return fmt.Sprintf("would switch %s off: unresponsive on both channels for fenceAfter (%s) and its power device reads on", n, d.p.FenceAfter)
	case ActPowerOn:
		return fmt.Sprintf("would switch %s on again: its volumes are released (afterFence: on)", n)
	case ActReadPower:
		return fmt.Sprintf("would read the power state of %s now (%s)", n, d.channels())
	}
	return fmt.Sprintf("would %s %s", a.Kind, n)
}
