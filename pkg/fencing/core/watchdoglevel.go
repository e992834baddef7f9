package core

import (
	"fmt"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// The watchdog level (docs/design.md §10): a node with no power device the
// fencer can read — none in its topology, or none that answers — is
// ordered to let its own watchdog reset it, and the wait that bounds the
// reset is the evidence. Its rules, in the order a suspicion meets them:
//
//   - the level is used only for a node whose topology has one (the
//     operator opted it in), when the levels before it gave nothing: there
//     are none, or the latest request failed; a power device that reads on
//     or off decides as ever;
//   - only with the node's armed statement for its current boot, signed
//     with its own key (the fencer checks the signature; WatchdogObs.Arm);
//   - the order is a power action: written only when the node has been
//     silent for WatchdogOrderAfter on the channels no other node can
//     forge — its agent to every liveness challenge, its kubelet's Lease
//     unrenewed — under the cluster's guards (quorum, storm,
//     maxConcurrentPowerActions, one control-plane node), the pause, dry
//     run and the exclusion label, and under the node's power Lease,
//     given back once the order is seen (the action is done);
//   - the evidence is the order seen (by this fencer, at SeenAt), no sign
//     of life since, and WatchdogWait of the longest armed statement seen
//     for the boot passed. A sign of life voids it for good for that order
//     — the node resets when its agent reads the order anyway, and is back
//     in another boot then; one after the wait is the safety alarm;
//   - an order stays until the Node reports another boot: then it is
//     withdrawn (every fencer counts on it staying while it waits).

// watchdogLevel is a suspicion's state on the watchdog level.
type watchdogLevel struct {
	// orderSent is when ActOrderReset last went out.
	orderSent time.Time
	// renew is the kubelet Lease renew time last seen, and renewSeen when
	// this fencer first saw it (its clock): the kubelet's silence counts
	// from there.
	renew, renewSeen time.Time
	// arm is the armed statement with the longest wait seen for the
	// node's boot in this suspicion: an agent restarted with other
	// figures states them anew, and its earlier run petted by the old ones.
	arm *WatchdogArm
}

// watchdogEngaged reports whether the node's watchdog level is to be used
// now: its topology has one, and the levels before it gave nothing (there
// are none, or failed is true: the latest request failed), or an order for
// its boot stands already.
func (d *decider) watchdogEngaged(failed bool) bool {
	if d.o.Watchdog.Level == 0 {
		return false
	}
	return !d.o.BMC.Configured || failed || d.standingOrder() != nil
}

// standingOrder is the fence order for the node's current boot, or nil.
func (d *decider) standingOrder() *FenceOrder {
	ord := d.o.Watchdog.Order
	if ord == nil || ord.BootID == "" || ord.BootID != d.bootID() {
		return nil
	}
	return ord
}

// withdrawStaleOrder withdraws a fence order whose boot is over: the Node
// reports another boot, in its kubelet's word.
func (d *decider) withdrawStaleOrder() {
	ord, n := d.o.Watchdog.Order, d.o.Node
	if ord == nil || n.BootID == "" || ord.BootID == n.BootID {
		return
	}
	d.do(Action{Kind: ActWithdrawOrder, BootID: ord.BootID, Message: fmt.Sprintf(
		"the fence order for boot %s is over: the node runs boot %s", ord.BootID, n.BootID)})
}

// noteWatchdog keeps what the watchdog level counts on while a node is
// suspect: when its kubelet's renewal last changed, and the longest-waiting
// armed statement for its boot.
func (d *decider) noteWatchdog() {
	o := d.o
	w := &d.t.suspicion.watchdog
	if r := o.Node.KubeletRenew; w.renewSeen.IsZero() || !r.Equal(w.renew) {
		w.renew, w.renewSeen = r, o.Now
	}
	if a := o.Watchdog.Arm; a != nil && a.BootID != "" && a.BootID == d.bootID() && (!a.Software || d.p.WatchdogAllowSoftware) &&
		(w.arm == nil || w.arm.BootID != a.BootID || WatchdogWait(*a) > WatchdogWait(*w.arm)) {
		arm := *a
		w.arm = &arm
	}
	if w.arm != nil && w.arm.BootID != d.bootID() {
		w.arm = nil
	}
}

// watchdog fences a suspect node on its watchdog level: waits on a standing
// order, or writes one when the node's word and the guards allow.
func (d *decider) watchdog(devices string) {
	o, t, p := d.o, d.t, d.p
	w := &t.suspicion.watchdog
	d.noteWatchdog()
	if ord := d.standingOrder(); ord != nil {
		d.awaitReset(ord)
		return
	}
	boot := d.bootID()
	if d.unarmed(devices) {
		return
	}
	if key, why, retry := d.orderBlocked(); why != "" {
		d.becomeConfirming("watchdog level: not ordering a reset: "+why, nil)
		if key == "cluster" {
			// Said: what holds the order back is the cluster's state. The
			// node's own silence growing to watchdogOrderAfter is the
			// way to every order, and the decision log says it.
			d.notice("wd-blocked", "Warning", vocab.EventCannotConfirmPowerState, fmt.Sprintf(
				"node stopped answering (%s)%s; not ordering its watchdog to reset it: %s", d.channels(), devices, why))
		}
		if retry > 0 {
			d.requeue(retry)
		}
		return
	}
	if h := d.heldBy(ActOrderReset); h != HoldNone {
		d.do(Action{Kind: ActOrderReset, BootID: boot})
		d.becomeConfirming(fmt.Sprintf("watchdog level: would order a reset; held (%s)", h), nil)
		return
	}
	if !o.Cluster.LeaseHeld {
		d.becomeConfirming("watchdog level: taking the power Lease to order a reset", nil)
		d.do(Action{Kind: ActAcquireLease})
		d.requeue(p.ReadBackoffMin)
		return
	}
	if !w.orderSent.IsZero() && o.Now.Sub(w.orderSent) < TaintRetry {
		d.becomeConfirming("watchdog level: waiting to see its fence order", nil)
		d.requeue(TaintRetry - o.Now.Sub(w.orderSent))
		return
	}
	w.orderSent = o.Now
	d.do(Action{Kind: ActOrderReset, BootID: boot, Message: fmt.Sprintf(
		"silent on every channel for %s%s: its watchdog resets it once its agent reads this order or fails to confirm there is none", p.WatchdogOrderAfter, devices)})
	d.becomeConfirming("watchdog level: fence order written for boot "+boot, nil)
	d.notice("wd-order", "Warning", vocab.EventFenceOrdered, fmt.Sprintf(
		"node silent (%s) for %s%s: fence order written for boot %s; its %s resets it within %s (timeout %s, confirm %s), and it is tainted then unless it shows life",
		d.channels(), p.WatchdogOrderAfter, devices, boot, watchdogKind(*w.arm), WatchdogWait(*w.arm), w.arm.Timeout, w.arm.Confirm))
	d.requeue(TaintRetry)
}

// unarmed reports, and says once, that the node has no armed statement
// an order may be written on: none for its boot as it stands now (the
// wait counts on the longest seen, noteWatchdog), one refused, or a
// software watchdog the policy does not accept.
func (d *decider) unarmed(devices string) bool {
	o, p := d.o, d.p
	boot, a := d.bootID(), o.Watchdog.Arm
	if d.t.suspicion.watchdog.arm != nil && a != nil && a.BootID == boot && (!a.Software || p.WatchdogAllowSoftware) {
		return false
	}
	why := "it stated no armed watchdog for boot " + boot
	switch {
	case o.Watchdog.Refused != "":
		why = "its armed statement was refused: " + o.Watchdog.Refused
	case a != nil && a.BootID == boot && a.Software:
		why = fmt.Sprintf("it armed a software watchdog (%s), which watchdog.allowSoftware does not accept", a.Device)
	}
	d.becomeConfirming("watchdog level: "+why, nil)
	d.notice("wd-unarmed", "Warning", vocab.EventCannotConfirmPowerState, fmt.Sprintf(
		"node stopped answering (%s)%s; its watchdog level cannot fence it: %s. Not tainted; run fenced confirm once you know it is off",
		d.channels(), devices, why))
	return true
}

// orderBlocked returns why a fence order may not be written now ("" if it
// may), a key that stays the same while the reason does (for its one
// Event), and when to look again (0: when something changes).
//
// Like powerOffBlocked, the node's silence rests only on what no other
// node can forge — its agent's silence to this fencer's challenges and its
// kubelet's Lease — but over WatchdogOrderAfter rather than fenceAfter:
// the kubelet's Ready condition takes the node lifecycle controller's
// grace period (~50 s) to turn, and the order's own wait follows.
func (d *decider) orderBlocked() (key, why string, retry time.Duration) {
	o, t, p := d.o, d.t, d.p
	a, w, after := o.Agent, t.suspicion.watchdog, p.WatchdogOrderAfter
	// Silent to a challenge of this suspicion, and counted from its start
	// at the earliest: an unanswered challenge of an earlier episode says
	// nothing of the agent now.
	if a.SilentSince.IsZero() || a.LastProof.After(a.SilentSince) || a.LastSilent.Before(t.suspicion.since) {
		d.challengeIfStale()
		if a.LastProof.After(t.suspicion.since) {
			return "answers", "its agent answers liveness challenges", p.ChallengeInterval
		}
		return "asking", "asking its agent for a proof of life", p.ChallengeInterval
	}
	if silent := o.Now.Sub(later(a.SilentSince, t.suspicion.since)); silent < after {
		d.challengeIfStale()
		return "silent", fmt.Sprintf("its agent has been silent to liveness challenges for %s, not yet watchdogOrderAfter (%s)",
			silent.Round(time.Millisecond), after), min(after-silent, p.ChallengeInterval)
	}
	if quiet := o.Now.Sub(w.renewSeen); quiet < after {
		return "kubelet", fmt.Sprintf("its kubelet's Lease changed %s ago, less than watchdogOrderAfter (%s)",
			quiet.Round(time.Millisecond), after), after - quiet
	}
	if why := d.clusterBlocked(); why != "" {
		return "cluster", why, p.RecheckPoweredOn
	}
	return "", "", 0
}

// awaitReset waits out a standing order's wait, and fences on it unless
// the node showed life since the order was seen.
func (d *decider) awaitReset(ord *FenceOrder) {
	o, t, p := d.o, d.t, d.p
	if o.Cluster.LeaseHeld {
		// The order is written: the power action is done (as a switch-off
		// once confirmed), and the Lease goes back, so that a rack of such
		// nodes is ordered one after the other, not a wait after the other.
		d.do(Action{Kind: ActReleaseLease})
	}
	if !t.voided.orderSeen.IsZero() && t.voided.orderSeen.Equal(ord.SeenAt) {
		d.becomeConfirming("watchdog level: the node showed life after its fence order; waiting for it to come back in another boot", nil)
		return
	}
	if ord.SeenAt.IsZero() {
		// Nothing to count from: a fencer that cannot say when it saw
		// the order has no wait that ends.
		d.becomeConfirming("watchdog level: a fence order for boot "+ord.BootID+" stands, seen at no known time: waiting", nil)
		return
	}
	arm := t.suspicion.watchdog.arm
	if arm == nil {
		d.becomeConfirming("watchdog level: a fence order for boot "+ord.BootID+" stands, but no armed statement of that boot: waiting", nil)
		d.notice("wd-order-unarmed", "Warning", vocab.EventCannotConfirmPowerState, fmt.Sprintf(
			"a fence order for boot %s stands, but this fencer has no armed statement of the node for that boot: it cannot tell when the node was reset, so it is not tainted; run fenced confirm once you know it is off",
			ord.BootID))
		return
	}
	ev := d.watchdogEvidence(ord, *arm)
	if life := LifeAfter(&ev, o); life != "" {
		d.void(&ev, life)
		return
	}
	if wait := ev.Watchdog.ResetBy().Sub(o.Now); wait > 0 {
		// The agent is asked all along: an answer is a sign of life that
		// voids the order's evidence.
		d.challengeIfStale()
		d.becomeConfirming(fmt.Sprintf("watchdog level: fence order seen at %s; its watchdog has reset it by %s",
			ord.SeenAt.UTC().Format(time.RFC3339Nano), ev.Watchdog.ResetBy().UTC().Format(time.RFC3339Nano)), nil)
		d.requeue(min(wait, p.ChallengeInterval))
		return
	}
	d.fenceIfStillTrue(ev)
}

// watchdogEvidence is the evidence of a standing order under arm, dated now.
func (d *decider) watchdogEvidence(ord *FenceOrder, arm WatchdogArm) Evidence {
	wait := WatchdogWait(arm)
	w := &WatchdogWaited{Timeout: Duration(arm.Timeout), Confirm: Duration(arm.Confirm), Device: arm.Device, Software: arm.Software,
		OrderSeenAt: ord.SeenAt, Wait: Duration(wait), KubeletLeaseRenewedAt: ord.KubeletRenewAtSeen}
	return Evidence{Method: vocab.EvidenceWatchdog, At: d.o.Now, BootID: ord.BootID, Watchdog: w, Reason: fmt.Sprintf(
		"fence order for boot %s seen at %s and no sign of life since: its %s (timeout %s), petted only while its agent confirmed within %s that there was no order, has reset it by %s",
		ord.BootID, ord.SeenAt.UTC().Format(time.RFC3339Nano), watchdogKind(arm), arm.Timeout, arm.Confirm, w.ResetBy().UTC().Format(time.RFC3339Nano))}
}

// watchdogKind names the watchdog in messages, a software one as weaker.
func watchdogKind(a WatchdogArm) string {
	name := "hardware watchdog"
	if a.Software {
		name = "SOFTWARE watchdog (weaker: a hung kernel does not run it)"
	}
	if a.Device != "" {
		name += " " + a.Device
	}
	return name
}

// resetContradicted handles watchdog evidence a sign of life voided, and
// reports whether that sign contradicts the watchdog: its agent answered,
// in the boot the order was for, after the wait that bounds the reset
// (both times by this fencer's clock) — the safety alarm. Either way the
// power Lease taken for the order goes back.
func (d *decider) resetContradicted(ev *Evidence) bool {
	o := d.o
	if o.Cluster.LeaseHeld {
		d.do(Action{Kind: ActReleaseLease})
	}
	if newBoot(ev, o) != "" || !o.Agent.LastProof.After(ev.Watchdog.ResetBy()) {
		return false
	}
	d.do(Action{Kind: ActSafetyAlarm, EventType: "Warning", Reason: vocab.EventWatchdogResetContradicted, Message: fmt.Sprintf(
		"SAFETY: a fence order for boot %s was seen at %s and its watchdog should have reset the node by %s, but its agent answered at %s in the same boot: not tainting; its watchdog (%s) cannot be trusted until a person looks",
		ev.BootID, ev.Watchdog.OrderSeenAt.UTC().Format(time.RFC3339Nano), ev.Watchdog.ResetBy().UTC().Format(time.RFC3339Nano),
		o.Agent.LastProof.UTC().Format(time.RFC3339Nano), ev.Watchdog.Device)})
	return true
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
