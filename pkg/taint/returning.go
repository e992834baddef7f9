package taint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

// The way back from a fence, written here and decided in the core
// (pkg/fencing/core/returning.go, docs/design.md §5): Remove swaps the
// out-of-service taint for fenced's returning taint and changes the cordon
// in one update; Lift takes the returning taint off once the node
// lifecycle controller has answered that change.

const (
	// ReturningTaintKey is fenced's own taint, on a node whose
	// out-of-service taint it took off until the controller-manager has
	// observed that. NoExecute, like the taint it replaces: the scheduler
	// places no pod there, and a kubelet admits none (a kubelet checks
	// NoExecute taints only), so no pod that does not tolerate it can
	// start there while a controller may still act on the old taint.
	ReturningTaintKey = "fenced.io/returning"
	// AnnotationReturning holds core.Returning, as JSON: what the swap
	// recorded, and whether the cordon is fenced's.
	AnnotationReturning = "fenced.io/returning"
)

// ErrCordonUnsettled is wrapped by Remove's error when the node lifecycle
// controller has not yet answered the last change of the node's cordon:
// its answer to that change would be taken for the answer to the swap.
var ErrCordonUnsettled = errors.New("the node lifecycle controller has not yet answered the last change of the node's cordon")

// ErrNotObserved is wrapped by Lift's error when the node lifecycle
// controller has not answered the cordon change of the swap: the
// controller-manager may still see the out-of-service taint.
var ErrNotObserved = errors.New("the controller-manager has not yet observed the removal of the out-of-service taint")

// CordonOf reads the node's cordon and the node lifecycle controller's
// taint for it (node.kubernetes.io/unschedulable:NoSchedule).
func CordonOf(n *corev1.Node) core.Cordon {
	c := core.Cordon{Unschedulable: n.Spec.Unschedulable}
	for _, tn := range n.Spec.Taints {
		if tn.Key == corev1.TaintNodeUnschedulable && tn.Effect == corev1.TaintEffectNoSchedule {
			c.Taint = true
		}
	}
	return c
}

// ReturningFormat is the version of AnnotationReturning's format this
// fenced writes, in the annotation's "v" field, and the newest it reads;
// the rule is EvidenceFormat's. A record without "v" is format 1.
const ReturningFormat = 1

// returningAnnotation is AnnotationReturning's value: the format version,
// then the record.
type returningAnnotation struct {
	V int `json:"v"`
	core.Returning
}

// ReturningOf parses the node's AnnotationReturning. ok is false when the
// node has none; err is set when it has one that does not parse, and is a
// *FormatError when it is in a newer format (a newer fenced's record,
// which this one neither follows nor removes).
func ReturningOf(n *corev1.Node) (r core.Returning, ok bool, err error) {
	raw, ok := n.Annotations[AnnotationReturning]
	if !ok {
		return core.Returning{}, false, nil
	}
	var a returningAnnotation
	if err := readFormat(n, AnnotationReturning, raw, ReturningFormat, &a); err != nil {
		return core.Returning{}, true, err
	}
	return a.Returning, true, nil
}

// HasReturningTaint reports whether n carries the returning taint.
func HasReturningTaint(n *corev1.Node) bool {
	for _, tn := range n.Spec.Taints {
		if tn.Key == ReturningTaintKey {
			return true
		}
	}
	return false
}

// Removal is what Remove wrote.
type Removal struct {
	// Node is the Node as written; nil when nothing was written.
	Node *corev1.Node
	// OutOfService: the out-of-service taint came off in that write; else
	// it was the probe made again.
	OutOfService bool
	// Record is the core.Returning the write recorded.
	Record core.Returning
}

// Remove takes fenced's out-of-service taint off node, conflict-safe, in
// one update that also
//   - puts fenced's returning taint (ReturningTaintKey:NoExecute) on, so
//     that no version of the Node has neither;
//   - changes the cordon as core.Probe says (cordons a node nobody
//     cordoned, uncordons fenced's own cordon, leaves anyone else's), so
//     that the node lifecycle controller's answer shows when the
//     controller-manager has seen this write;
//   - records both in AnnotationReturning, and drops the evidence
//     annotations with the taint.
//
// On a node without the out-of-service taint but with fenced's record it
// makes the probe again if the cordon change was undone before it was
// answered (core.Returning.ProbeLost, checked on the Node as read for the
// write), and writes nothing otherwise.
//
// It writes only on a settled cordon (core.Cordon.Settled, checked on the
// Node as read for the write), else the error wraps ErrCordonUnsettled. A
// taint without AnnotationAppliedBy is never touched: the error wraps
// ErrNotOurs. A node with neither fenced's taint nor its record is left
// alone, but evidence annotations left without their taint are cleaned
// up: left behind, they would make a later operator's taint look like
// fenced's.
//
// Evidence in a format newer than this fenced reads (a newer fenced wrote
// it) is never removed, with its taint or without: nothing is written and
// the error is the *FormatError (see EvidenceFormat).
//
// Whether the node may be unfenced (Ready with a new boot ID, no stale
// VolumeAttachment) is the caller's decision; reason says why it was made
// and goes into the Normal Event OutOfServiceTaintRemoved.
func (t *Tainter) Remove(ctx context.Context, node string, reason string) (res Removal, err error) {
	var appliedBy string
	var ev core.Evidence
	err = t.onConflict(ctx, func(ctx context.Context) error {
		res = Removal{}
		n, err := t.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		oos := HasTaint(n)
		if oos && !AppliedByFenced(n) {
			return ErrNotOurs
		}
		before, recorded, err := ReturningOf(n)
		if err != nil {
			return err
		}
		c := CordonOf(n)
		switch {
		case !oos && !recorded:
			return t.cleanEvidence(ctx, n)
		case !oos && !before.ProbeLost(c):
			// Swapped already, and the probe stands (or was answered): a
			// caller whose view lags. Probing again would only put the
			// answer off.
			return nil
		case !c.Settled():
			return ErrCordonUnsettled
		}
		var prev *core.Returning
		if recorded {
			prev = &before
		}
		appliedBy = n.Annotations[AnnotationAppliedBy]
		var evErr error
		ev, _, evErr = EvidenceOf(n) // for the Event only; a bad annotation is removed all the same
		if NewerFormat(evErr) > 0 {
			// A newer fenced fenced it: only a fenced that reads its
			// evidence may judge the fence over.
			return evErr
		}
		unschedulable, mine := core.Probe(c, prev)
		rec := core.Returning{At: t.now(), By: t.identity, Cordoned: mine, UnschedulableTaint: c.Taint}
		raw, err := json.Marshal(returningAnnotation{V: ReturningFormat, Returning: rec})
		if err != nil {
			return err
		}
		n.Spec.Taints = withoutKey(n.Spec.Taints, TaintKey)
		if !HasReturningTaint(n) {
			added := metav1.NewTime(t.now())
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: ReturningTaintKey, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added})
		}
		n.Spec.Unschedulable = unschedulable
		delete(n.Annotations, AnnotationAppliedBy)
		delete(n.Annotations, AnnotationEvidence)
		n.Annotations[AnnotationReturning] = string(raw)
		done, err := t.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		res = Removal{Node: done, OutOfService: oos, Record: rec}
		return nil
	})
	if err != nil {
		return Removal{}, fmt.Errorf("removing %s from node %s: %w", TaintKey, node, err)
	}
	if res.OutOfService {
		method := ev.Method
		if method == "" {
			method = "unknown"
		}
		t.recorder.Eventf(nodeRef(res.Node), corev1.EventTypeNormal, string(vocab.EventOutOfServiceTaintRemoved),
			"Removed %s (applied by %s, method %s): %s. %s:%s stays until the controller-manager has observed that",
			TaintKey, appliedBy, method, reason, ReturningTaintKey, corev1.TaintEffectNoExecute)
	}
	return res, nil
}

// cleanEvidence removes evidence annotations left without their taint
// from n (someone removed fenced's taint by hand), if there are any.
func (t *Tainter) cleanEvidence(ctx context.Context, n *corev1.Node) error {
	_, by := n.Annotations[AnnotationAppliedBy]
	_, ev := n.Annotations[AnnotationEvidence]
	if !by && !ev {
		return nil
	}
	if _, _, err := EvidenceOf(n); NewerFormat(err) > 0 {
		return err // a newer fenced's annotation: its business, not ours
	}
	delete(n.Annotations, AnnotationAppliedBy)
	delete(n.Annotations, AnnotationEvidence)
	_, err := t.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	return err
}

// Lift takes fenced's returning taint off node, with AnnotationReturning
// and the cordon fenced set (if it is still there), in one update,
// conflict-safe — once the node lifecycle controller has answered the
// swap's cordon change (core.Returning.Observed, checked on the Node as
// read for the write; else the error wraps ErrNotObserved). A node
// without fenced's record is left alone (nil, nil), and so is one that
// carries the out-of-service taint again (an error). It records the
// Normal Event ReturningTaintLifted with reason.
func (t *Tainter) Lift(ctx context.Context, node string, reason string) (*corev1.Node, error) {
	return t.lift(ctx, node, reason, true)
}

// ForceLift is Lift without waiting for the controller-manager: `fenced
// unfence --force`, for a cluster whose node lifecycle controller does not
// run.
func (t *Tainter) ForceLift(ctx context.Context, node string, reason string) (*corev1.Node, error) {
	return t.lift(ctx, node, reason, false)
}

func (t *Tainter) lift(ctx context.Context, node, reason string, observed bool) (*corev1.Node, error) {
	var done *corev1.Node
	var uncordoned bool
	err := t.onConflict(ctx, func(ctx context.Context) error {
		done, uncordoned = nil, false
		n, err := t.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		rec, recorded, err := ReturningOf(n)
		switch {
		case err != nil && (observed || NewerFormat(err) > 0):
			return err // forced, an unreadable record goes (without its cordon), but not a newer fenced's
		case !recorded:
			return nil
		case HasTaint(n):
			return fmt.Errorf("it carries %s again", TaintKey)
		case observed && !rec.Observed(CordonOf(n)):
			return ErrNotObserved
		}
		n.Spec.Taints = withoutKey(n.Spec.Taints, ReturningTaintKey)
		if rec.Cordoned && n.Spec.Unschedulable {
			n.Spec.Unschedulable, uncordoned = false, true
		}
		delete(n.Annotations, AnnotationReturning)
		done, err = t.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lifting %s from node %s: %w", ReturningTaintKey, node, err)
	}
	if done == nil {
		return nil, nil
	}
	also := ""
	if uncordoned {
		also = ", and uncordoned the node (fenced had cordoned it)"
	}
	t.recorder.Eventf(nodeRef(done), corev1.EventTypeNormal, string(vocab.EventReturningTaintLifted),
		"Lifted %s%s: %s", ReturningTaintKey, also, reason)
	return done, nil
}

// withoutKey returns taints without those with key.
func withoutKey(taints []corev1.Taint, key string) []corev1.Taint {
	kept := taints[:0:0]
	for _, tn := range taints {
		if tn.Key != key {
			kept = append(kept, tn)
		}
	}
	return kept
}
