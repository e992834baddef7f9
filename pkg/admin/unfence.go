package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// UnfenceOptions are the inputs of Unfence.
type UnfenceOptions struct {
	// Node is the node to unfence.
	Node string
	// Reason is the operator's explanation, recorded in the Events.
	Reason string
	// Force removes the taint even when checks fail; recorded.
	Force bool
	// Consent is the go-ahead Force needs: without a terminal and without
	// Yes, Unfence with Force does nothing (ErrNeedsYes); on a terminal it
	// asks once a check has failed.
	Consent
}

// forced asks for the go-ahead to skip the failed checks named in what.
func (o *Operator) forced(ctx context.Context, opts UnfenceOptions, node, what string) error {
	fmt.Fprintf(o.Out, "WARNING: --force %s on node %s. If the node is not really back on a new boot, or still\n"+
		"holds its volumes, its pods may run twice and write to the same disks.\n", what, node)
	return opts.Ask(ctx, o.Out, fmt.Sprintf("Go on with node %s anyway?", node))
}

// Unfence is `fenced unfence`: it removes the out-of-service taint fenced
// applied once the node is Ready with a boot ID other than the one the
// evidence recorded and no VolumeAttachment of it is left — the fencer's own
// recovery conditions (docs/design.md §2). Force skips them (they are still
// printed) and records that it did. A taint fenced did not apply is never
// touched, forced or not, nor one whose evidence a newer fenced wrote in a
// format this one does not read. Refusals wrap ErrRefused.
//
// It removes the taint as a fencer does (taint.Tainter.Remove): fenced's
// returning taint takes its place until the controller-manager has
// observed the removal; a fencer then lifts it, or `fenced unfence` run
// again on the returning node (unfenceReturning).
func (o *Operator) Unfence(ctx context.Context, opts UnfenceOptions) error {
	if opts.Force {
		if err := opts.Check(); err != nil {
			return err
		}
	}
	w := o.Out
	n, err := o.getNode(ctx, opts.Node)
	if err != nil {
		return err
	}
	if !taint.HasTaint(n) {
		if _, recorded := n.Annotations[taint.AnnotationReturning]; recorded {
			return o.unfenceReturning(ctx, n, opts)
		}
		fmt.Fprintf(w, "Node %s has no %s taint: nothing to do.\n", n.Name, taint.TaintKey)
		return nil
	}
	if !taint.AppliedByFenced(n) {
		return refused("the %s taint on node %s was not applied by fenced (no %s annotation): fenced never removes it. "+
			"Whoever applied it removes it: kubectl taint nodes %s %s-", taint.TaintKey, n.Name, taint.AnnotationAppliedBy, n.Name, taint.TaintKey)
	}
	ev, _, evErr := taint.EvidenceOf(n)
	if f := taint.NewerFormat(evErr); f > 0 {
		// Not a failed check --force could skip: this fenced cannot tell
		// what the evidence says, so it is not its to judge.
		return refused("node %s was fenced by a newer fenced (evidence format %d; this fenced reads formats up to %d): "+
			"unfence it with that fenced's CLI, or upgrade this one; --force does not change that", n.Name, f, taint.EvidenceFormat)
	}
	fmt.Fprintf(w, "Node %s: fenced by %s", n.Name, n.Annotations[taint.AnnotationAppliedBy])
	if evErr == nil {
		fmt.Fprintf(w, " (%s)", ev.Summary())
	}
	fmt.Fprintln(w)

	checks := o.unfenceChecks(ctx, n, ev, evErr)
	var failed []string
	for _, c := range checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
			failed = append(failed, c.Name)
		}
		fmt.Fprintf(w, "  [%s] %-20s %s\n", mark, c.Name+":", c.Detail)
	}
	if len(failed) > 0 && !opts.Force {
		return refused("node %s stays fenced: failed check(s): %s. Fix that, or pass --force to remove the taint anyway (recorded)",
			n.Name, strings.Join(failed, ", "))
	}

	if len(failed) > 0 {
		if err := o.forced(ctx, opts, n.Name, "removes the out-of-service taint although "+strings.Join(failed, ", ")+" failed"); err != nil {
			return err
		}
	}
	user := o.identity(ctx)
	why := fmt.Sprintf("unfenced by %s (fenced unfence), checks passed: %s", user, reasonOr(opts.Reason))
	skipped := "none failed"
	if len(failed) > 0 {
		skipped = "failed: " + strings.Join(failed, ", ")
	}
	if opts.Force {
		why = fmt.Sprintf("unfenced by %s with --force, checks skipped (%s): %s", user, skipped, reasonOr(opts.Reason))
	}
	res, err := taint.NewTainter(o.Client, "fenced-unfence/"+user, o.Recorder).Remove(ctx, n.Name, why)
	switch {
	case errors.Is(err, taint.ErrNotOurs):
		return refused("%v", err) // the taint was replaced by someone else's meanwhile
	case errors.Is(err, taint.ErrCordonUnsettled):
		return refused("node %s keeps its taint for now: %v (its cordon and the %s taint disagree), "+
			"and its answer to that would be taken for an answer to the removal. Run fenced unfence again in a moment",
			n.Name, taint.ErrCordonUnsettled, corev1.TaintNodeUnschedulable)
	case err != nil:
		return err
	case !res.OutOfService:
		fmt.Fprintf(w, "Node %s lost its taint meanwhile: nothing to do.\n", n.Name)
		return nil
	}
	if opts.Force {
		// Recorded where the next person to look will find it: on the Node
		// and in the log, besides the terminal.
		o.log().Warn("unfence forced: out-of-service taint removed without the recovery checks",
			"node", n.Name, "by", user, "reason", opts.Reason, "failedChecks", failed)
		o.warn(n, vocab.EventUnfenceForced, "%s removed the out-of-service taint with --force, checks skipped (%s): %s",
			user, skipped, reasonOr(opts.Reason))
	}
	removed := taint.HistoryEntry{Node: n.Name, Action: taint.HistoryUnfence, At: o.now(), By: "fenced-unfence/" + user,
		Reason: why, Forced: opts.Force && len(failed) > 0}
	if evErr == nil {
		removed.Method, removed.Evidence = ev.Method, ev.Summary()
	}
	o.recordHistory(ctx, removed)
	fmt.Fprintf(w, "Removed %s from node %s.\n", taint.TaintKey, n.Name)
	fmt.Fprintf(w, "%s:%s takes its place until the controller-manager has observed the removal; a fencer lifts it then (or run fenced unfence %s again).\n",
		taint.ReturningTaintKey, corev1.TaintEffectNoExecute, n.Name)
	return nil
}

// unfenceReturning is Unfence on a node whose out-of-service taint is off
// and fenced's returning taint on: it lifts the returning taint once the
// controller-manager has observed the removal (what a fencer does), and
// at once with Force, recorded.
func (o *Operator) unfenceReturning(ctx context.Context, n *corev1.Node, opts UnfenceOptions) error {
	w := o.Out
	rec, _, recErr := taint.ReturningOf(n)
	cordon := taint.CordonOf(n)
	observed := recErr == nil && rec.Observed(cordon)
	fmt.Fprintf(w, "Node %s: out-of-service taint removed by %s at %s; %s on until the controller-manager has observed that\n",
		n.Name, rec.By, rec.At.UTC().Format(time.RFC3339), taint.ReturningTaintKey)
	check := core.RecoveryCheck{Name: "controller-manager", OK: observed,
		Detail: "its node lifecycle controller answered the cordon change of the removal"}
	switch {
	case recErr != nil:
		check.Detail = fmt.Sprintf("cannot tell: %v", recErr)
	case !observed && rec.ForeignCordon(cordon):
		check.Detail = "the node is cordoned by someone else: uncordon it, and the node lifecycle controller's answer to that will do"
	case !observed:
		check.Detail = fmt.Sprintf("no answer yet to the cordon change (spec.unschedulable %v, %s taint %v)", cordon.Unschedulable, corev1.TaintNodeUnschedulable, cordon.Taint)
	}
	mark := "ok  "
	if !observed {
		mark = "FAIL"
	}
	fmt.Fprintf(w, "  [%s] %-20s %s\n", mark, check.Name+":", check.Detail)
	if !observed && !opts.Force {
		return refused("node %s keeps %s: the controller-manager may still act on the out-of-service taint it no longer has. "+
			"A fencer lifts it once the controller-manager has observed the removal; --force lifts it now (recorded)", n.Name, taint.ReturningTaintKey)
	}
	if !observed {
		if err := o.forced(ctx, opts, n.Name, "lifts "+taint.ReturningTaintKey+" before the controller-manager has observed the removal"); err != nil {
			return err
		}
	}
	user := o.identity(ctx)
	tn := taint.NewTainter(o.Client, "fenced-unfence/"+user, o.Recorder)
	var written *corev1.Node
	var err error
	if observed {
		written, err = tn.Lift(ctx, n.Name, fmt.Sprintf("lifted by %s (fenced unfence): %s", user, reasonOr(opts.Reason)))
	} else {
		written, err = tn.ForceLift(ctx, n.Name, fmt.Sprintf("lifted by %s with --force, before the controller-manager observed the removal: %s", user, reasonOr(opts.Reason)))
	}
	if errors.Is(err, taint.ErrNotObserved) {
		return refused("node %s keeps %s: %v (its cordon changed meanwhile)", n.Name, taint.ReturningTaintKey, err)
	}
	if err != nil {
		return err
	}
	if written == nil {
		fmt.Fprintf(w, "Node %s lost its returning taint meanwhile: nothing to do.\n", n.Name)
		return nil
	}
	if !observed {
		o.log().Warn("unfence forced: returning taint lifted before the controller-manager observed the removal", "node", n.Name, "by", user, "reason", opts.Reason)
		o.warn(n, vocab.EventUnfenceForced, "%s lifted %s with --force before the controller-manager observed the removal of the out-of-service taint: %s",
			user, taint.ReturningTaintKey, reasonOr(opts.Reason))
	}
	fmt.Fprintf(w, "Lifted %s from node %s.\n", taint.ReturningTaintKey, n.Name)
	return nil
}

// unfenceChecks evaluates the recovery rule (core.Recovery, the fencer's
// own) without acting on it, with what an operator needs to read: the Ready
// condition as the API shows it, and why a check could not be made.
func (o *Operator) unfenceChecks(ctx context.Context, n *corev1.Node, ev core.Evidence, evErr error) []core.RecoveryCheck {
	c := taint.ReadyCondition(n)
	ready := c != nil && c.Status == corev1.ConditionTrue
	var left []string
	list, listErr := o.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if listErr == nil {
		// VolumeAttachments have no field selector on spec.nodeName.
		for _, a := range list.Items {
			if a.Spec.NodeName == n.Name {
				left = append(left, a.Name)
			}
		}
	}
	checks := core.Recovery(ready, n.Status.NodeInfo.BootID, ev.BootID, len(left), left...)
	checks[0].Detail = o.readyText(n)
	if evErr != nil {
		checks[1] = core.RecoveryCheck{Name: checks[1].Name, Detail: fmt.Sprintf("cannot verify a reboot: %v", evErr)}
	}
	if listErr != nil {
		checks[2] = core.RecoveryCheck{Name: checks[2].Name, Detail: fmt.Sprintf("cannot list VolumeAttachments: %v", listErr)}
	}
	return checks
}
