package publish

import (
	"context"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Fence orders (docs/design.md §10). A fencer orders a node's watchdog to
// reset it by writing a Lease fenced-order-<node> that names the node's
// boot; the node's agent stops petting its watchdog once a read of the API
// finds one for its boot, and every fencer counts on the order staying
// until the node is back in another boot. The admission policy
// OrderPolicyName admits a create, update or delete of fenced-order-* only
// from a fencer: no agent, and no other writer, can order a reset or take
// an order back.
const (
	// OrderLeasePrefix names each node's fence order: fenced-order-<node>.
	OrderLeasePrefix = "fenced-order-"
	// AnnotationOrderBoot holds the boot ID the order is for.
	AnnotationOrderBoot = "fenced.io/fence-order-boot"
)

// OrderLeaseName is node's fence order.
func OrderLeaseName(node string) string { return OrderLeasePrefix + node }

// Order is a fence order as the API holds it.
type Order struct {
	Node, BootID string
	// By is the fencer that wrote it (the Lease's holder).
	By string
	// UID tells one order object from another of the same name: a fence
	// order deleted and written again is a new order.
	UID types.UID
}

// OrderOf reads the fence order a Lease holds; ok is false for a Lease
// that is not one (another name, or no boot).
func OrderOf(l *coordinationv1.Lease) (o Order, ok bool) {
	if !strings.HasPrefix(l.Name, OrderLeasePrefix) || len(l.Name) == len(OrderLeasePrefix) {
		return Order{}, false
	}
	o = Order{Node: l.Name[len(OrderLeasePrefix):], BootID: l.Annotations[AnnotationOrderBoot], UID: l.UID}
	if l.Spec.HolderIdentity != nil {
		o.By = *l.Spec.HolderIdentity
	}
	return o, o.BootID != ""
}

// WriteOrder writes a fence order for node's boot bootID in namespace ns,
// in fencer by's name. An order for that boot that stands already is left
// as it is (every fencer counts its wait from when it saw it); one for an
// earlier boot is replaced.
func WriteOrder(ctx context.Context, client kubernetes.Interface, ns, node, bootID, by string) error {
	leases := client.CoordinationV1().Leases(ns)
	for attempt := 0; ; attempt++ {
		l, err := leases.Get(ctx, OrderLeaseName(node), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: OrderLeaseName(node), Namespace: ns,
				Annotations: map[string]string{AnnotationOrderBoot: bootID}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(by)}}
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		case err == nil && l.Annotations[AnnotationOrderBoot] == bootID:
			return nil
		case err == nil:
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[AnnotationOrderBoot] = bootID
			l.Spec.HolderIdentity = ptr.To(by)
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing the fence order %s/%s for boot %s: %w", ns, OrderLeaseName(node), bootID, err)
		}
		return nil
	}
}

// WithdrawOrder deletes node's fence order in namespace ns if it is for
// boot bootID (an order for another boot, written since, stays). withdrawn
// reports whether it did.
func WithdrawOrder(ctx context.Context, client kubernetes.Interface, ns, node, bootID string) (withdrawn bool, err error) {
	leases := client.CoordinationV1().Leases(ns)
	l, err := leases.Get(ctx, OrderLeaseName(node), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the fence order %s/%s: %w", ns, OrderLeaseName(node), err)
	case l.Annotations[AnnotationOrderBoot] != bootID:
		return false, nil
	}
	err = leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("withdrawing the fence order %s/%s for boot %s: %w", ns, OrderLeaseName(node), bootID, err)
	}
	return true, nil
}

// ReadOrder reads node's fence order in namespace ns from the API server:
// a read without a resourceVersion, which the API server serves from etcd
// with a quorum read — linearizable, as the watchdog argument needs (a read
// that starts after the order was written finds it). found is false when
// there is none.
func ReadOrder(ctx context.Context, client kubernetes.Interface, ns, node string) (o Order, found bool, err error) {
	l, err := client.CoordinationV1().Leases(ns).Get(ctx, OrderLeaseName(node), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Order{}, false, nil
	case err != nil:
		return Order{}, false, err
	}
	o, ok := OrderOf(l)
	if !ok {
		// A Lease of that name without a boot orders nothing; only a
		// fencer can have written it.
		return Order{}, false, nil
	}
	return o, true, nil
}
