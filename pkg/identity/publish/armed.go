package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/identity"
)

// AnnotationWatchdogArmed holds, on a node's key Lease, its agent's armed
// statement: the watchdog it armed for the key's boot, signed with that key
// (docs/design.md §10). A fencer believes it only when the signature
// checks against the key on the same Lease, which only the node's own
// identity may write; a new run's key (Publish) drops it, so a statement
// never outlives the run that made it.
const AnnotationWatchdogArmed = "fenced.io/watchdog-armed"

// armedAnnotation is AnnotationWatchdogArmed's value.
type armedAnnotation struct {
	BootID   string `json:"bootID"`
	Timeout  string `json:"timeout"`
	Confirm  string `json:"confirm"`
	Device   string `json:"device,omitempty"`
	Software bool   `json:"software,omitempty"`
	// Sig is the key's signature of the identity.Statement of kind
	// KindArmed these fields make, in standard base64 (JSON's []byte).
	Sig []byte `json:"sig"`
}

// ErrNotArmed is wrapped by ArmedOf for a key Lease with no armed
// statement: the node's agent armed no watchdog in this run.
var ErrNotArmed = errors.New("no armed statement")

// PublishArmed writes the armed statement a, signed with key for bootID,
// on node's key Lease in namespace ns, which Publish must have created
// with key's public half. Other annotations are kept.
func PublishArmed(ctx context.Context, client kubernetes.Interface, ns, node, bootID string, key *identity.Key, a identity.Armed) error {
	sig := key.Sign(identity.Statement{Kind: identity.KindArmed, Node: node, BootID: bootID, Armed: a})
	raw, err := json.Marshal(armedAnnotation{BootID: bootID, Timeout: a.Timeout.String(), Confirm: a.Confirm.String(),
		Device: a.Device, Software: a.Software, Sig: sig})
	if err != nil {
		return err
	}
	return setKeyLeaseAnnotation(ctx, client, ns, node, AnnotationWatchdogArmed, string(raw))
}

// WithdrawArmed takes the armed statement off node's key Lease: the agent
// disarmed its watchdog (a clean shutdown it announced).
func WithdrawArmed(ctx context.Context, client kubernetes.Interface, ns, node string) error {
	return setKeyLeaseAnnotation(ctx, client, ns, node, AnnotationWatchdogArmed, "")
}

// setKeyLeaseAnnotation sets (value "": removes) one annotation of node's
// key Lease, retrying on conflicts.
func setKeyLeaseAnnotation(ctx context.Context, client kubernetes.Interface, ns, node, key, value string) error {
	leases := client.CoordinationV1().Leases(ns)
	for attempt := 0; ; attempt++ {
		l, err := leases.Get(ctx, LeaseName(node), metav1.GetOptions{})
		if err == nil {
			if old, ok := l.Annotations[key]; old == value && (ok || value == "") {
				return nil
			}
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			if value == "" {
				delete(l.Annotations, key)
			} else {
				l.Annotations[key] = value
			}
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing %s on Lease %s/%s: %w", key, ns, LeaseName(node), err)
		}
		return nil
	}
}

// ArmedOf reads and checks the armed statement on a node's key Lease: it
// must be signed with the key the Lease publishes (FromLease), for the
// key's boot. It returns the boot and the statement, or why not (wrapping
// ErrNotArmed when there is none, or FromLease's error).
func ArmedOf(l *coordinationv1.Lease) (bootID string, a identity.Armed, err error) {
	k, err := FromLease(l)
	if err != nil {
		return "", identity.Armed{}, err
	}
	raw, ok := l.Annotations[AnnotationWatchdogArmed]
	if !ok {
		return "", identity.Armed{}, fmt.Errorf("lease %s: %w", l.Name, ErrNotArmed)
	}
	var s armedAnnotation
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return "", identity.Armed{}, fmt.Errorf("lease %s: annotation %s: %w", l.Name, AnnotationWatchdogArmed, err)
	}
	if a.Timeout, err = time.ParseDuration(s.Timeout); err == nil {
		a.Confirm, err = time.ParseDuration(s.Confirm)
	}
	if err != nil {
		return "", identity.Armed{}, fmt.Errorf("lease %s: annotation %s: %w", l.Name, AnnotationWatchdogArmed, err)
	}
	a.Device, a.Software = s.Device, s.Software
	switch {
	case s.BootID != k.BootID:
		return "", identity.Armed{}, fmt.Errorf("lease %s: the armed statement is for boot %s, the key for boot %s", l.Name, s.BootID, k.BootID)
	case a.Timeout <= 0 || a.Confirm <= 0:
		return "", identity.Armed{}, fmt.Errorf("lease %s: the armed statement says timeout %s and confirm %s: both must be positive", l.Name, a.Timeout, a.Confirm)
	case !k.Key.Verify(identity.Statement{Kind: identity.KindArmed, Node: k.Node, BootID: s.BootID, Armed: a}, s.Sig):
		return "", identity.Armed{}, fmt.Errorf("lease %s: the armed statement's signature does not check against the node's key for boot %s", l.Name, k.BootID)
	}
	return s.BootID, a, nil
}
