package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// ConfirmOptions are the inputs of Confirm.
type ConfirmOptions struct {
	// Node is the node to fence.
	Node string
	// Reason is the operator's explanation, recorded in the evidence.
	Reason string
	// PowerOff switches the node off through its BMC when it reads on,
	// instead of refusing.
	PowerOff bool
	// AgentURL is an agent's metrics endpoint for the gossip view; empty
	// skips it.
	AgentURL string
	// Consent is the operator's go-ahead: without a terminal and without
	// Yes, Confirm does nothing (ErrNeedsYes).
	Consent
}

// bmcView is what Confirm learned from the node's BMC.
type bmcView struct {
	b        device.BMC
	endpoint string
	reading  *core.Reading // a reading of "off" (evidence), or nil
	on       bool          // the BMC reads on
}

// Confirm is `fenced confirm`: it prints the evidence it can gather about
// the node, refuses when the BMC reads on (or, with PowerOff, switches it
// off and waits until it reads off), warns, asks, and then applies the
// out-of-service taint with manual evidence naming the operator, marks the
// node not ready and force-deletes its pods.
//
// A node that already has the taint is left alone (nil error). Refusals
// wrap ErrRefused.
func (o *Operator) Confirm(ctx context.Context, opts ConfirmOptions) error {
	if err := opts.Check(); err != nil {
		return err
	}
	w := o.Out
	n, err := o.getNode(ctx, opts.Node)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Node %s\n", n.Name)
	fmt.Fprintf(w, "  ready:       %s\n", o.readyText(n))
	fmt.Fprintf(w, "  boot ID:     %s\n", orNone(n.Status.NodeInfo.BootID))
	fmt.Fprintf(w, "  system UUID: %s\n", orNone(n.Status.NodeInfo.SystemUUID))
	fmt.Fprintf(w, "  taints:      %s\n", taintsText(n))
	if l := taint.ExcludedBy(n); l != "" {
		// The label keeps fenced's automatic actions away; a person who
		// runs confirm decides for this node, so it goes on (docs/operations.md,
		// "Switches").
		fmt.Fprintf(w, "  excluded:    yes (%s=true): fencers take no action on this node; this confirmation is yours\n", l)
	}
	if taint.HasTaint(n) {
		return alreadyTainted(w, n)
	}
	o.printGossip(ctx, n.Name, opts.AgentURL)
	bv, err := o.checkBMC(ctx, n, opts.PowerOff)
	if err != nil {
		return err
	}
	if bv.reading == nil {
		// No word from the BMC: the node's other power devices (fencing
		// topology) must not read it on either.
		if err := o.checkLevels(ctx, n); err != nil {
			return err
		}
	}

	user := o.identity(ctx)
	fmt.Fprintf(w, "  you:         %s (as the API server knows you; recorded as who confirmed)\n\n", user)
	fmt.Fprintf(w, "WARNING: if node %s is not really powered off, two machines will write to the same disks\n"+
		"and corrupt them. The out-of-service taint makes Kubernetes force-delete the node's pods and\n"+
		"force-detach its volumes at once, so they start elsewhere while this machine, if it still\n"+
		"runs, keeps writing. Confirm only if you know it is off (or cut from its storage).\n", n.Name)
	if bv.on {
		fmt.Fprintf(w, "fenced will first switch it off hard through its BMC %s (no graceful shutdown).\n", bv.endpoint)
	}
	if err := opts.Ask(ctx, w, fmt.Sprintf("Mark node %s as powered off?", n.Name)); err != nil {
		return err
	}

	if bv.on {
		fmt.Fprintf(w, "Switching node %s off through its BMC %s...\n", n.Name, bv.endpoint)
		verify := o.Verify
		if verify.Progress == nil {
			verify.Progress = device.ProgressPrinter(w, "node "+n.Name, 0)
		}
		res, err := device.PowerOffVerified(ctx, bv.b, verify)
		if err != nil {
			return fmt.Errorf("node %s not fenced: power-off through BMC %s failed: %w", n.Name, bv.endpoint, err)
		}
		bv.reading.Power, bv.reading.At, bv.reading.PoweredOffByFenced = vocab.PowerOff, o.now(), true
		fmt.Fprintf(w, "BMC reads off after %s.\n", res.Elapsed.Round(100*time.Millisecond))
	}

	ev := core.Evidence{
		Method: vocab.EvidenceManual, By: user, At: o.now(), Reason: opts.Reason, BMC: bv.reading,
		// The boot the operator was shown: pkg/taint refuses if the node
		// has rebooted since, while the question was open.
		BootID: n.Status.NodeInfo.BootID,
	}
	tn := taint.NewTainter(o.Client, "fenced-confirm/"+user, o.Recorder)
	applied, err := tn.Apply(ctx, n.Name, ev)
	if err != nil {
		return err
	}
	if !applied {
		fmt.Fprintf(w, "Node %s got an out-of-service taint from elsewhere meanwhile: nothing written.\n", n.Name)
		return nil
	}
	o.warn(n, vocab.EventManualFenceConfirmed, "%s confirmed node %s is powered off (fenced confirm): %s", user, n.Name, reasonOr(opts.Reason))
	o.recordHistory(ctx, taint.HistoryEntry{Node: n.Name, Action: taint.HistoryFence, At: ev.At, By: "fenced-confirm/" + user,
		Method: ev.Method, Evidence: ev.Summary(), Reason: opts.Reason})
	fmt.Fprintf(w, "Tainted node %s %s=%s:NoExecute with manual evidence (by %s).\n", n.Name, taint.TaintKey, taint.TaintValue, user)

	// The taint is the evidence; the rest only makes the recovery faster
	// (the pod GC would get there), so a failure here is reported, not
	// undone.
	var errs []error
	if _, changed, err := tn.MarkNotReady(ctx, n.Name, "confirmed powered off by "+user+" (fenced confirm)"); err != nil {
		errs = append(errs, err)
	} else if changed {
		fmt.Fprintf(w, "Marked node %s Ready=False (reason %s).\n", n.Name, taint.ReasonPoweredOff)
	}
	if deleted, err := tn.ForceDeletePods(ctx, n.Name); err != nil {
		errs = append(errs, err)
	} else {
		fmt.Fprintf(w, "Force-deleted %d pod(s) of node %s.\n", deleted, n.Name)
	}
	if len(errs) > 0 {
		return fmt.Errorf("node %s is tainted, but: %w", n.Name, errors.Join(errs...))
	}
	return nil
}

func alreadyTainted(w io.Writer, n *corev1.Node) error {
	if !taint.AppliedByFenced(n) {
		fmt.Fprintf(w, "Node %s already has the %s taint, not applied by fenced: nothing to do (fenced records no evidence for a taint it did not apply).\n",
			n.Name, taint.TaintKey)
		return nil
	}
	summary := "evidence unreadable"
	if ev, _, err := taint.EvidenceOf(n); err == nil {
		summary = ev.Summary()
	}
	fmt.Fprintf(w, "Node %s is already fenced by %s (%s): nothing to do.\n", n.Name, n.Annotations[taint.AnnotationAppliedBy], summary)
	return nil
}

func (o *Operator) readyText(n *corev1.Node) string {
	c := taint.ReadyCondition(n)
	if c == nil {
		return "no Ready condition"
	}
	s := fmt.Sprintf("%s for %s (since %s)", c.Status, age(c.LastTransitionTime.Time, o.now()), c.LastTransitionTime.UTC().Format("2006-01-02 15:04:05Z"))
	if c.Reason != "" {
		s += ", " + c.Reason
	}
	return s
}

// printGossip prints the ring as one agent sees it. Gossip is context for
// the operator, not evidence, so an agent that cannot be read is reported
// and nothing more.
func (o *Operator) printGossip(ctx context.Context, node, agentURL string) {
	if agentURL == "" {
		fmt.Fprintf(o.Out, "  gossip:      not checked (no --agent URL given)\n")
		return
	}
	v, err := ReadAgent(ctx, agentURL)
	if err != nil {
		fmt.Fprintf(o.Out, "  gossip:      could not read the agent: %v\n", err)
		return
	}
	phase := v.Phases[node]
	if phase == "" {
		phase = "not tracked by this agent (not a fencer?)"
	}
	fmt.Fprintf(o.Out, "  gossip:      ring seen by %s: %s; fencer phase of %s: %s\n", v.URL, v.MembersText(), node, phase)
}

// checkBMC reads the node's power state and GUID, prints them, and decides:
// a reading of "on" refuses unless powerOff, a GUID of another machine
// always refuses, and a BMC that cannot be read leaves the operator's word
// as the only evidence (docs/design.md §2: manual evidence needs only that fenced
// did not read "on").
func (o *Operator) checkBMC(ctx context.Context, n *corev1.Node, powerOff bool) (bmcView, error) {
	w := o.Out
	b, endpoint, ok := o.bmc(n.Name)
	if !ok {
		fmt.Fprintf(w, "  BMC:         not in the BMC inventory: power state NOT checked; your confirmation is the only evidence\n")
		if powerOff {
			return bmcView{}, refused("--power-off needs node %s in the BMC inventory (--config)", n.Name)
		}
		return bmcView{}, nil
	}
	bv := bmcView{b: b, endpoint: endpoint}
	state, err := b.PowerState(ctx)
	at := o.now()
	if err != nil || (state != vocab.PowerOn && state != vocab.PowerOff) {
		fmt.Fprintf(w, "  BMC:         %s: power state could NOT be read (%s): %v\n", endpoint, kindOf(err), err)
		fmt.Fprintf(w, "               not a refusal: your confirmation will be the only evidence\n")
		if powerOff {
			return bmcView{}, refused("--power-off: cannot switch node %s off through a BMC that cannot be read", n.Name)
		}
		return bmcView{}, nil
	}
	// The GUID is checked before anything is switched off: an inventory
	// entry pointing at another machine's BMC must not cost that machine
	// its power, nor this node a taint on someone else's reading.
	guid, gerr := b.SystemGUID(ctx)
	uuid := n.Status.NodeInfo.SystemUUID
	guidText, mismatch := guid, false
	switch {
	case gerr != nil:
		guid, guidText = "", "(not reported)"
	case uuid == "":
		guidText += " (the node reports no systemUUID to compare)"
	case core.SameSystemUUID(guid, uuid):
		guidText += " (matches the node's systemUUID)"
	default:
		guidText += " (does NOT match the node's systemUUID " + uuid + ")"
		mismatch = true
	}
	fmt.Fprintf(w, "  BMC:         %s: power %s, system GUID %s\n", endpoint, state, guidText)
	if mismatch {
		return bmcView{}, refused("the BMC %s reports system GUID %s but node %s has systemUUID %s: the inventory may point at another machine's BMC",
			endpoint, guid, n.Name, uuid)
	}
	bv.reading = &core.Reading{Power: state, At: at, Endpoint: endpoint, SystemGUID: guid}
	if state == vocab.PowerOn {
		if !powerOff {
			return bmcView{}, refused("the BMC %s reads node %s's power ON: it may still be writing to its volumes. "+
				"Switch it off first (fenced bmc off %s) or pass --power-off", endpoint, n.Name, n.Name)
		}
		bv.on = true
	}
	return bv, nil
}

// levelSource is an inventory that knows a node's fencing levels
// (*device.Inventory).
type levelSource interface {
	Levels(node string) [][]device.Plug
}

// checkLevels reads every fencing level of the node other than its BMC
// alone (already read) and refuses when one reads it on — an outlet that
// still feeds it, a VM that runs — or names another machine: "fenced did
// not read the power as on" is what manual evidence rests on.
func (o *Operator) checkLevels(ctx context.Context, n *corev1.Node) error {
	src, ok := o.Inventory.(levelSource)
	if !ok {
		return nil
	}
	for i, plugs := range src.Levels(n.Name) {
		if len(plugs) == 1 && plugs[0].Device == vocab.DeviceBMC {
			continue
		}
		lr := device.OnLevel(ctx, i+1, plugs, vocab.OpPowerStatus, device.ReadPlug, o.now, nil)
		var parts []string
		for _, p := range lr.Plugs {
			state := "unreadable"
			if p.Reading != nil {
				state = string(p.Reading.Power)
			}
			parts = append(parts, plugLabel(p.Device, p.Plug)+" "+state)
		}
		fmt.Fprintf(o.Out, "  level %d:     %s\n", i+1, strings.Join(parts, ", "))
		r, _ := core.CombineLevels([]core.LevelRead{lr})
		switch {
		case r == nil:
		case r.GUIDMismatch(n.Status.NodeInfo.SystemUUID) != nil:
			bad := r.GUIDMismatch(n.Status.NodeInfo.SystemUUID)
			return refused("fencing level %d: %s reports system GUID %s but node %s has systemUUID %s: the configuration may point at another machine",
				i+1, bad.Endpoint, bad.SystemGUID, n.Name, n.Status.NodeInfo.SystemUUID)
		case r.Power == vocab.PowerOn:
			return refused("fencing level %d reads node %s's power ON (%s): it may still be writing to its volumes. "+
				"Switch that level off first (fenced device off %s --level %d)", i+1, n.Name, strings.Join(parts, ", "), n.Name, i+1)
		}
	}
	return nil
}

func reasonOr(r string) string {
	if r == "" {
		return "(no reason given)"
	}
	return r
}
