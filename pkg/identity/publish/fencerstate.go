package publish

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/vocab"
)

// A fencer's armed state on its own key Lease, for `fenced status`: that
// it runs and is ready, and what the configuration in force says (mode,
// dry-run, how many Nodes it can fence, the file's hash). Every fencer —
// in a pod or run by systemd — writes it, so status reads it from the API
// without knowing how fencers are deployed. Display only: no fencer, and
// nothing in any decision, reads it; the Lease's writer is tied to its
// node by the admission policy, but what it says about its configuration
// is the fencer's word, not evidence.
//
// The fencer writes it again every FencerStateRenewEvery with the Lease's
// spec.renewTime, and at once when it changes (a reload); a state whose
// renewTime is older than FencerStateStaleAfter is stale (the fencer
// stopped or cannot reach the API server). Publish, which each run of an
// agent does at start, removes it: a state belongs to the run that wrote
// it, and an agent that runs as an observer now must not look like a
// fencer.
const (
	// AnnotationFencerReady is "true" once the fencer is in the gossip
	// ring (its /readyz), "false" before.
	AnnotationFencerReady = "fenced.io/fencer-ready"
	// AnnotationFencerMode is policy.mode in force (a vocab.Mode).
	AnnotationFencerMode = "fenced.io/fencer-mode"
	// AnnotationFencerDryRun is policy.dryRun in force, "true" or "false".
	AnnotationFencerDryRun = "fenced.io/fencer-dry-run"
	// AnnotationFencerInventoryNodes is how many Nodes the inventory in
	// force gives a fencing level (fenced_inventory_nodes).
	AnnotationFencerInventoryNodes = "fenced.io/fencer-inventory-nodes"
	// AnnotationFencerConfigHash is the first 6 bytes of the SHA-256 of
	// the configuration file in force, in hex, as the fencer's log says
	// it; "" when the file no longer held it at start.
	AnnotationFencerConfigHash = "fenced.io/fencer-config-hash"

	// FencerStateRenewEvery is how often a fencer writes its state again.
	FencerStateRenewEvery = 30 * time.Second
	// FencerStateStaleAfter: a state not renewed for this long is stale.
	// Three renewals, so that one slow write does not make it so.
	FencerStateStaleAfter = 3 * FencerStateRenewEvery
)

// fencerStateAnnotations are every annotation of a fencer's state.
var fencerStateAnnotations = []string{AnnotationFencerReady, AnnotationFencerMode, AnnotationFencerDryRun,
	AnnotationFencerInventoryNodes, AnnotationFencerConfigHash}

// FencerState is what a fencer publishes of itself.
type FencerState struct {
	Ready          bool
	Mode           vocab.Mode
	DryRun         bool
	InventoryNodes int
	ConfigHash     string
}

func (s FencerState) annotations() map[string]string {
	return map[string]string{
		AnnotationFencerReady:          strconv.FormatBool(s.Ready),
		AnnotationFencerMode:           string(s.Mode),
		AnnotationFencerDryRun:         strconv.FormatBool(s.DryRun),
		AnnotationFencerInventoryNodes: strconv.Itoa(s.InventoryNodes),
		AnnotationFencerConfigHash:     s.ConfigHash,
	}
}

// PublishFencerState writes s on node's key Lease in namespace ns and
// renews the Lease (spec.renewTime = now). The Lease must exist (Publish
// creates it): ErrNoKeyLease otherwise. Its holder, key and other
// annotations are kept.
func PublishFencerState(ctx context.Context, client kubernetes.Interface, ns, node string, s FencerState, now time.Time) error {
	leases := client.CoordinationV1().Leases(ns)
	for attempt := 0; ; attempt++ {
		l, err := leases.Get(ctx, LeaseName(node), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("publishing this fencer's state on Lease %s/%s: %w", ns, LeaseName(node), ErrNoKeyLease)
		}
		if err == nil {
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			for k, v := range s.annotations() {
				l.Annotations[k] = v
			}
			at := metav1.NewMicroTime(now)
			l.Spec.RenewTime = &at
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("publishing this fencer's state on Lease %s/%s: %w", ns, LeaseName(node), err)
		}
		return nil
	}
}

// ErrNoKeyLease: the agent's key Lease is not there (yet).
var ErrNoKeyLease = errors.New("no key Lease (the agent has not published its key yet)")

// FencerStateOf reads the state a fencer published on its key Lease: the
// node it is about (the Lease's holder, tied to its writer by the
// admission policy), the state, and when it was last renewed. ok is false
// for a Lease that is not an agent's key Lease or holds no fencer state
// (an observer's); unreadable values read as their zero.
func FencerStateOf(l *coordinationv1.Lease) (node string, s FencerState, renewed time.Time, ok bool) {
	node, _, ok = GracefulShutdownOf(l) // the same key Lease checks
	if !ok {
		return "", FencerState{}, time.Time{}, false
	}
	a := l.Annotations
	if _, ok := a[AnnotationFencerReady]; !ok {
		return "", FencerState{}, time.Time{}, false
	}
	s.Ready, _ = strconv.ParseBool(a[AnnotationFencerReady])
	s.Mode = vocab.Mode(a[AnnotationFencerMode])
	s.DryRun, _ = strconv.ParseBool(a[AnnotationFencerDryRun])
	s.InventoryNodes, _ = strconv.Atoi(a[AnnotationFencerInventoryNodes])
	s.ConfigHash = a[AnnotationFencerConfigHash]
	if l.Spec.RenewTime != nil {
		renewed = l.Spec.RenewTime.Time
	}
	return node, s, renewed, true
}
