package taint

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

const (
	// TaintKey is the taint KEP-2268 gives the pod GC and attach/detach
	// controllers to act on a node that is really shut down.
	TaintKey = "node.kubernetes.io/out-of-service"
	// TaintValue is the taint value the Kubernetes docs use; the controllers look
	// at the key only.
	TaintValue = "nodeshutdown"
	// AnnotationAppliedBy holds the identity of the fencer that applied the
	// taint. Its presence is what makes a taint fenced's to remove.
	AnnotationAppliedBy = "fenced.io/applied-by"
	// AnnotationEvidence holds the Evidence, as JSON.
	AnnotationEvidence = "fenced.io/evidence"
	// ReasonPoweredOff is the reason of the Ready=False condition
	// MarkNotReady writes.
	ReasonPoweredOff = "PoweredOff"
)

// ErrNotOurs is wrapped by Remove's error when the node's out-of-service
// taint was not applied by fenced (no AnnotationAppliedBy): an operator or
// another tool put it there, and only they may take it away.
var ErrNotOurs = errors.New("out-of-service taint was not applied by fenced")

// ErrNotFenced is wrapped by ForceDeletePods' error when the node has no
// out-of-service taint: force-deleting the pods of a node nobody declared
// shut down could start a second writer on its volumes.
var ErrNotFenced = errors.New("node has no out-of-service taint")

// conflictBackoff bounds the read-modify-write retries. Conflicts come from
// the kubelet, the node lifecycle controller and other fencers writing the
// same Node; a few quick retries with growing pauses (about 2.5 s in all)
// outlast any of them.
var conflictBackoff = wait.Backoff{
	Steps:    8,
	Duration: 10 * time.Millisecond,
	Factor:   2,
	Jitter:   0.5,
	Cap:      2 * time.Second,
}

// Tainter applies and removes the out-of-service taint. It is safe for
// concurrent use, and several Tainters (one per fencer) may work on the same
// Node: every write is a conditional update of what was just read.
type Tainter struct {
	client   kubernetes.Interface
	identity string
	recorder record.EventRecorder
	now      func() time.Time
	backoff  wait.Backoff // conflictBackoff; tests shorten it
}

// New returns a Tainter that writes through client and records identity in
// AnnotationAppliedBy of the taints it applies. recorder receives the Events
// (see NewRecorder); nil means no Events. An empty identity becomes "fenced",
// because an empty AnnotationAppliedBy would say nothing about who did it.
func NewTainter(client kubernetes.Interface, identity string, recorder record.EventRecorder) *Tainter {
	if identity == "" {
		identity = "fenced"
	}
	if recorder == nil {
		recorder = noopRecorder{}
	}
	return &Tainter{client: client, identity: identity, recorder: recorder, now: time.Now, backoff: conflictBackoff}
}

// Identity returns the identity the Tainter records in AnnotationAppliedBy.
func (t *Tainter) Identity() string { return t.identity }

// HasTaint reports whether n carries the out-of-service taint, with any value
// or effect: the controllers act on the key alone.
func HasTaint(n *corev1.Node) bool {
	if n == nil {
		return false
	}
	for _, tn := range n.Spec.Taints {
		if tn.Key == TaintKey {
			return true
		}
	}
	return false
}

// AppliedByFenced reports whether n has AnnotationAppliedBy, i.e. whether its
// out-of-service taint is fenced's (any fencer's) to remove.
func AppliedByFenced(n *corev1.Node) bool {
	if n == nil {
		return false
	}
	_, ok := n.Annotations[AnnotationAppliedBy]
	return ok
}

// Apply adds the taint TaintKey=Value:NoExecute (with TimeAdded) and both
// annotations to node in one update, so no reader ever sees a fenced taint
// without its evidence. On a conflict it re-reads the Node and decides again.
//
// It returns applied=false and no error without writing if the taint is
// already there: with AnnotationAppliedBy it is already fenced's (another
// fencer, or an earlier call, got there first); without it someone else, an
// operator say, tainted the node, and fenced must never claim that taint.
//
// The evidence must pass core.Evidence.Validate and fit the Node: its BootID, if
// set, must be the node's current boot ID, and a BMC SystemGUID must match
// the node's systemUUID when both are known. Empty By and BootID are filled
// in with the Tainter's identity and the node's boot ID as read. Otherwise the
// error wraps core.ErrInvalidEvidence and nothing is written.
//
// On success a Normal Event OutOfServiceTaintApplied is recorded on the Node.
func (t *Tainter) Apply(ctx context.Context, node string, ev core.Evidence) (applied bool, err error) {
	written, err := t.ApplyIf(ctx, node, ev, nil)
	return written != nil, err
}

// ApplyIf is Apply with one more check of the caller's, run on the Node
// as read right before each write attempt: the evidence must still be
// true when the taint lands, and the caller knows best what could have
// voided it since its decision (a sign of life, the reading's age). An
// error from check stops the write and is returned, wrapped. ApplyIf
// returns the Node as written, so that the caller can go on from it
// without waiting for its informer; nil when nothing was written.
func (t *Tainter) ApplyIf(ctx context.Context, node string, ev core.Evidence, check func(*corev1.Node) error) (written *corev1.Node, err error) {
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	var done *corev1.Node
	var stored core.Evidence
	err = t.onConflict(ctx, func(ctx context.Context) error {
		done = nil
		n, err := t.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if HasTaint(n) {
			// Already fenced's, or someone else's: either way nothing to do.
			return nil
		}
		stored = ev
		if stored.By == "" {
			stored.By = t.identity
		}
		if stored.BootID == "" {
			stored.BootID = n.Status.NodeInfo.BootID
		}
		// Re-checked on every attempt: the Node may have changed between
		// the caller's decision and this write.
		if err := checkEvidence(stored, n); err != nil {
			return err
		}
		if check != nil {
			if err := check(n); err != nil {
				return err
			}
		}
		raw, err := encodeEvidence(stored)
		if err != nil {
			return err
		}
		added := metav1.NewTime(t.now())
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{
			Key:       TaintKey,
			Value:     TaintValue,
			Effect:    corev1.TaintEffectNoExecute,
			TimeAdded: &added,
		})
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[AnnotationAppliedBy] = t.identity
		n.Annotations[AnnotationEvidence] = raw
		done, err = t.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("applying %s to node %s: %w", TaintKey, node, err)
	}
	if done == nil {
		return nil, nil
	}
	t.recorder.Eventf(nodeRef(done), corev1.EventTypeNormal, string(vocab.EventOutOfServiceTaintApplied),
		"Applied %s=%s:%s, method %s: %s", TaintKey, TaintValue, corev1.TaintEffectNoExecute, stored.Method, stored.Summary())
	return done, nil
}

// Remove removes the out-of-service taint and both annotations from node in
// one update, conflict-safe, but only if AnnotationAppliedBy is present (the
// identity in it does not matter: fencers share the job). If the node has the
// taint without the annotation, nothing is written and the error wraps
// ErrNotOurs. If it has neither, removed is false and err nil.
//
// Leftover annotations without a taint (someone removed the taint by hand)
// are cleaned up, with removed=false: left behind, they would make a later
// operator's taint look like fenced's.
//
// Evidence in a format newer than this fenced reads (a newer fenced wrote
// it) is never removed, forced or not: nothing is written and the error is
// the *EvidenceFormatError (see EvidenceFormat).
//
// Whether the node may be unfenced (Ready with a new boot ID, no stale
// VolumeAttachment) is the caller's decision; reason says why it was made and
// goes into the Normal Event OutOfServiceTaintRemoved.
func (t *Tainter) Remove(ctx context.Context, node string, reason string) (removed bool, err error) {
	var done *corev1.Node
	var appliedBy string
	var ev core.Evidence
	err = t.onConflict(ctx, func(ctx context.Context) error {
		done, removed = nil, false
		n, err := t.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !AppliedByFenced(n) {
			if HasTaint(n) {
				return ErrNotOurs
			}
			return nil
		}
		appliedBy = n.Annotations[AnnotationAppliedBy]
		var evErr error
		ev, _, evErr = EvidenceOf(n) // for the Event only; a bad annotation is removed all the same
		if NewerEvidenceFormat(evErr) > 0 {
			// A newer fenced fenced it: only a fenced that reads its
			// evidence may judge the fence over.
			return evErr
		}
		kept := n.Spec.Taints[:0:0]
		for _, tn := range n.Spec.Taints {
			if tn.Key == TaintKey {
				removed = true
				continue
			}
			kept = append(kept, tn)
		}
		n.Spec.Taints = kept
		delete(n.Annotations, AnnotationAppliedBy)
		delete(n.Annotations, AnnotationEvidence)
		done, err = t.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("removing %s from node %s: %w", TaintKey, node, err)
	}
	if done == nil || !removed {
		return false, nil
	}
	method := ev.Method
	if method == "" {
		method = "unknown"
	}
	t.recorder.Eventf(nodeRef(done), corev1.EventTypeNormal, string(vocab.EventOutOfServiceTaintRemoved),
		"Removed %s (applied by %s, method %s): %s", TaintKey, appliedBy, method, reason)
	return true, nil
}

// onConflict runs fn, which must read what it modifies, again after each
// Conflict, with t.backoff, and stops early when ctx is done. When the
// retries run out it returns the last Conflict.
func (t *Tainter) onConflict(ctx context.Context, fn func(context.Context) error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, t.backoff, func(ctx context.Context) (bool, error) {
		last = fn(ctx)
		switch {
		case last == nil:
			return true, nil
		case apierrors.IsConflict(last):
			return false, nil
		default:
			return false, last
		}
	})
	if wait.Interrupted(err) && last != nil && apierrors.IsConflict(last) && ctx.Err() == nil {
		return fmt.Errorf("still conflicting after %d attempts: %w", t.backoff.Steps, last)
	}
	return err
}

// nodeRef is the Event's involvedObject. A reference rather than the Node
// itself, so that any recorder, whatever scheme it was built with, can use it.
func nodeRef(n *corev1.Node) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}
}

// noopRecorder discards Events (New with a nil recorder).
type noopRecorder struct{}

func (noopRecorder) Event(runtime.Object, string, string, string)          {}
func (noopRecorder) Eventf(runtime.Object, string, string, string, ...any) {}
func (noopRecorder) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}
