// Package publish binds an agent's public key to its node through the
// Kubernetes API: each agent writes its key and boot ID on a Lease named
// after its node (fenced-agent-<node>) in fenced's namespace, and fencers
// read it from there.
//
// Why a fencer may believe that Lease: the ValidatingAdmissionPolicy
// shipped with fenced (deploy/daemonset/base/agent-identity-policy.yaml,
// PolicyName) admits a write of fenced-agent-<node> only from an identity
// bound to <node>: a ServiceAccount token of a pod running on that node
// (its authentication.kubernetes.io/node-name claim, which the API server
// puts in pod-bound tokens since Kubernetes 1.30), or, for agents run by
// systemd, a host credential whose user name is fenced:node:<node>.
// The shared gossip key plays no part, so a compromised worker can
// publish a key for itself only. A fencer checks that the policy is in
// force (PolicyInForce) before it takes any node's signed word.
package publish

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/vocab"
)

// Names of the objects that bind keys to nodes.
const (
	// LeasePrefix names each agent's key Lease: fenced-agent-<node>.
	LeasePrefix = "fenced-agent-"
	// AnnotationPublicKey holds the agent's key (identity.PublicKey.String).
	AnnotationPublicKey = "fenced.io/agent-public-key"
	// AnnotationBootID holds the boot the key was made in.
	AnnotationBootID = "fenced.io/agent-boot-id"
	// AnnotationGracefulShutdown holds what the agent found of its
	// kubelet's graceful node shutdown (a vocab.GracefulShutdown), for
	// `fenced diagnose --all`. Advice only: no fencer decision reads it.
	AnnotationGracefulShutdown = "fenced.io/graceful-shutdown"
	// PolicyName is the ValidatingAdmissionPolicy (and its binding) that
	// lets only a node's own identity write its key Lease, and only
	// fencers write the power Leases.
	PolicyName = "fenced-agent-identity"
)

// LeaseName is the key Lease of node.
func LeaseName(node string) string { return LeasePrefix + node }

// Key is a node's published key.
type Key struct {
	Node   string
	BootID string
	Key    identity.PublicKey
	// At is when the agent published it.
	At time.Time
}

// FromLease reads the key a Lease publishes.
func FromLease(l *coordinationv1.Lease) (Key, error) {
	if len(l.Name) <= len(LeasePrefix) || l.Name[:len(LeasePrefix)] != LeasePrefix {
		return Key{}, fmt.Errorf("lease %s is not an agent key Lease", l.Name)
	}
	k := Key{Node: l.Name[len(LeasePrefix):], BootID: l.Annotations[AnnotationBootID]}
	if k.BootID == "" {
		return Key{}, fmt.Errorf("lease %s: no %s annotation", l.Name, AnnotationBootID)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != k.Node {
		return Key{}, fmt.Errorf("lease %s: holder is not node %s", l.Name, k.Node)
	}
	text, ok := l.Annotations[AnnotationPublicKey]
	if !ok {
		return Key{}, fmt.Errorf("lease %s: %w", l.Name, ErrKeyWithdrawn)
	}
	var err error
	if k.Key, err = identity.ParsePublicKey(text); err != nil {
		return Key{}, fmt.Errorf("lease %s: %w", l.Name, err)
	}
	if l.Spec.AcquireTime != nil {
		k.At = l.Spec.AcquireTime.Time
	}
	return k, nil
}

// Publish writes node's key for bootID on its Lease in namespace ns,
// creating or replacing it. The write is admitted only for node's own
// identity (see the package comment); a refusal is returned as it is.
func Publish(ctx context.Context, client kubernetes.Interface, ns, node, bootID string, key identity.PublicKey, now time.Time) error {
	leases := client.CoordinationV1().Leases(ns)
	at := metav1.NewMicroTime(now)
	want := func(l *coordinationv1.Lease) {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationPublicKey] = key.String()
		l.Annotations[AnnotationBootID] = bootID
		l.Spec.HolderIdentity = ptr.To(node)
		l.Spec.AcquireTime = &at
		l.Spec.RenewTime = &at
	}
	for attempt := 0; ; attempt++ {
		l, err := leases.Get(ctx, LeaseName(node), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(node), Namespace: ns}}
			want(l)
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		case err == nil:
			want(l)
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("publishing this agent's key on Lease %s/%s: %w", ns, LeaseName(node), err)
		}
		return nil
	}
}

// ErrKeyWithdrawn is wrapped by FromLease for a key Lease whose agent took
// its key back (Withdraw): the node's word counts for nothing until a new
// run publishes its own.
var ErrKeyWithdrawn = errors.New("the agent withdrew its key")

// Withdraw takes key off node's key Lease in namespace ns, if it is still
// the key there (a later run's key is left alone): the agent does so when
// its run said words that must not be believed while the host runs on in
// the same boot — a shutdown-complete and a leave, when the shutdown was
// cancelled after the leave — since anyone who saw them could replay them.
// The Lease stays, holder and boot included (a write the admission policy
// admits from the node's own identity); only the key annotation goes.
// withdrawn reports whether key was there to take.
func Withdraw(ctx context.Context, client kubernetes.Interface, ns, node string, key identity.PublicKey) (withdrawn bool, err error) {
	leases := client.CoordinationV1().Leases(ns)
	for attempt := 0; ; attempt++ {
		l, err := leases.Get(ctx, LeaseName(node), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err == nil && l.Annotations[AnnotationPublicKey] != key.String():
			return false, nil // not this run's key (any more)
		case err == nil:
			delete(l.Annotations, AnnotationPublicKey)
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("withdrawing this agent's key from Lease %s/%s: %w", ns, LeaseName(node), err)
		}
		return true, nil
	}
}

// Read returns the key node's Lease in namespace ns publishes, with the
// Lease's own errors (NotFound when there is none) and FromLease's.
func Read(ctx context.Context, client kubernetes.Interface, ns, node string) (Key, error) {
	l, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName(node), metav1.GetOptions{})
	if err != nil {
		return Key{}, err
	}
	return FromLease(l)
}

// PublishGracefulShutdown writes g on node's key Lease in namespace ns,
// which Publish must have created: the Lease is the node's own (the
// admission policy lets no one else write it), so what it says about the
// node's kubelet is the node's word. Other annotations are kept.
func PublishGracefulShutdown(ctx context.Context, client kubernetes.Interface, ns, node string, g vocab.GracefulShutdown) error {
	leases := client.CoordinationV1().Leases(ns)
	for attempt := 0; ; attempt++ {
		l, err := leases.Get(ctx, LeaseName(node), metav1.GetOptions{})
		if err == nil {
			if l.Annotations[AnnotationGracefulShutdown] == string(g) {
				return nil
			}
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[AnnotationGracefulShutdown] = string(g)
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("publishing %s=%s on Lease %s/%s: %w", AnnotationGracefulShutdown, g, ns, LeaseName(node), err)
		}
		return nil
	}
}

// GracefulShutdownOf reads what a node's key Lease says of its kubelet's
// graceful node shutdown: the node it is about (its holder, which the
// admission policy ties to the writer), and the word — GracefulUnknown
// when absent or not one of the words. ok is false for a Lease that is
// not an agent's key Lease.
func GracefulShutdownOf(l *coordinationv1.Lease) (node string, g vocab.GracefulShutdown, ok bool) {
	if !strings.HasPrefix(l.Name, LeasePrefix) || len(l.Name) == len(LeasePrefix) {
		return "", "", false
	}
	node = l.Name[len(LeasePrefix):]
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != node {
		return "", "", false
	}
	g = vocab.GracefulShutdown(l.Annotations[AnnotationGracefulShutdown])
	if !g.Valid() {
		g = vocab.GracefulUnknown
	}
	return node, g, true
}

// ErrPolicyNotInForce is wrapped by PolicyInForce when the admission
// policy that binds keys to nodes is missing or does not deny.
var ErrPolicyNotInForce = errors.New("the agent identity admission policy is not in force")

// PolicyInForce checks that the ValidatingAdmissionPolicy PolicyName and a
// binding of it that denies are installed: without them any agent could
// publish a key in another node's name, and no node's signed word would
// mean anything.
func PolicyInForce(ctx context.Context, client kubernetes.Interface) error {
	adm := client.AdmissionregistrationV1()
	p, err := adm.ValidatingAdmissionPolicies().Get(ctx, PolicyName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%w: ValidatingAdmissionPolicy %s: %v", ErrPolicyNotInForce, PolicyName, err)
	}
	if p.Spec.FailurePolicy != nil && *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
		return fmt.Errorf("%w: ValidatingAdmissionPolicy %s has failurePolicy %s, want Fail", ErrPolicyNotInForce, PolicyName, *p.Spec.FailurePolicy)
	}
	b, err := adm.ValidatingAdmissionPolicyBindings().Get(ctx, PolicyName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%w: ValidatingAdmissionPolicyBinding %s: %v", ErrPolicyNotInForce, PolicyName, err)
	}
	if b.Spec.PolicyName != PolicyName {
		return fmt.Errorf("%w: binding %s binds policy %q", ErrPolicyNotInForce, PolicyName, b.Spec.PolicyName)
	}
	for _, a := range b.Spec.ValidationActions {
		if a == admissionregistrationv1.Deny {
			return nil
		}
	}
	return fmt.Errorf("%w: binding %s does not deny (validationActions %v)", ErrPolicyNotInForce, PolicyName, b.Spec.ValidationActions)
}
