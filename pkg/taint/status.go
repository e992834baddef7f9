package taint

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// MarkNotReady is the fast path of docs/design.md §4: a powered-off node's kubelet
// cannot report, so its Ready condition stays True until the node lifecycle
// controller's grace period (50 s) runs out, and then says Unknown. While it
// says True the pod GC controller does not act on the out-of-service taint.
// If the condition is True (or missing), MarkNotReady sets it to False with
// reason ReasonPoweredOff and message, through the status subresource,
// conflict-safe. That is truthful, and the kubelet overwrites it when the
// node comes back. LastHeartbeatTime is left alone: fenced is not the
// kubelet.
//
// False and Unknown are left alone: both mean not ready to every consumer
// (the pod GC and the attach/detach controller act on anything but True).
// Unknown is what the node lifecycle controller writes for a silent
// kubelet — and it writes it again after any other write of the condition,
// taking that write for a sign of life: writing False over it starts a war
// of writes in which the node looks healthy to the controller now and then.
// So after the first write only the kubelet's own Ready=True (a node back,
// or never off) makes another.
//
// n is the Node as written, or as read when nothing was written (nil on an
// error): the freshest view there is, for a caller whose cache may lag.
func (t *Tainter) MarkNotReady(ctx context.Context, node string, message string) (n *corev1.Node, changed bool, err error) {
	err = t.onConflict(ctx, func(ctx context.Context) error {
		changed = false
		read, err := t.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n = read
		now := metav1.NewTime(t.now())
		c := ReadyCondition(read)
		switch {
		case c == nil:
			read.Status.Conditions = append(read.Status.Conditions, corev1.NodeCondition{
				Type:               corev1.NodeReady,
				Status:             corev1.ConditionFalse,
				Reason:             ReasonPoweredOff,
				Message:            message,
				LastTransitionTime: now,
			})
		case c.Status != corev1.ConditionTrue:
			return nil
		default:
			c.Status = corev1.ConditionFalse
			c.Reason = ReasonPoweredOff
			c.Message = message
			c.LastTransitionTime = now
		}
		written, err := t.client.CoreV1().Nodes().UpdateStatus(ctx, read, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		n, changed = written, true
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("marking node %s not ready: %w", node, err)
	}
	return n, changed, nil
}

// ReadyCondition returns the Node's Ready condition (a pointer into n, so
// that a caller may change it before an update), or nil when it has none.
func ReadyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// InternalIP is the Node's first InternalIP address ("" when it has none).
// The kubelet reports it under NodeRestriction, so no other node can move
// it: fenced reaches a node's agent only there.
func InternalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// podPageSize bounds one List of a node's pods. A node runs at most a few
// hundred pods, so usually there is a single page.
const podPageSize = 500

// ForceDeletePods deletes every pod bound to node (field selector
// spec.nodeName) with grace period 0, so that no replacement waits for the
// pod GC controller's 20 s tick. It returns how many pods it deleted; pods
// already gone, or replaced by a new pod of the same name in the meantime (a
// StatefulSet's), are skipped without error: each delete is conditional on
// the UID that was listed, so a replacement is never touched.
//
// As a last guard it refuses (error wrapping ErrNotFenced) unless the node
// carries the out-of-service taint, fenced's or an operator's: force deletion
// is only safe where the node is known to be off, which is exactly what the
// taint declares. Errors for single pods don't stop the others; they are
// returned joined.
func (t *Tainter) ForceDeletePods(ctx context.Context, node string) (int, error) {
	n, err := t.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("force-deleting pods of node %s: %w", node, err)
	}
	if !HasTaint(n) {
		return 0, fmt.Errorf("force-deleting pods of node %s: %w", node, ErrNotFenced)
	}
	var pods []corev1.Pod
	opts := metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		Limit:         podPageSize,
	}
	for {
		list, err := t.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return 0, fmt.Errorf("listing pods of node %s: %w", node, err)
		}
		pods = append(pods, list.Items...)
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	zero := int64(0)
	deleted := 0
	var errs []error
	for i := range pods {
		p := &pods[i]
		// The server filters by node; checking again costs nothing and
		// keeps a client that ignores field selectors from deleting
		// everything.
		if p.Spec.NodeName != node {
			continue
		}
		uid := p.UID
		err := t.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero,
			Preconditions:      &metav1.Preconditions{UID: &uid},
		})
		switch {
		case err == nil:
			deleted++
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or the name now belongs to a replacement
			// (UID precondition failed).
		default:
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
			if ctx.Err() != nil {
				return deleted, errors.Join(append(errs, ctx.Err())...)
			}
		}
	}
	if len(errs) > 0 {
		return deleted, fmt.Errorf("force-deleting pods of node %s: %w", node, errors.Join(errs...))
	}
	return deleted, nil
}
