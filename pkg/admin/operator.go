// Package admin holds the logic of the commands an operator runs by hand:
// `fenced confirm`, `fenced unfence`, `fenced status` and `fenced diagnose`
// (an [Operator] against one cluster), and `fenced bmc`, `fenced device` and
// `fenced topology check` ([UseBMC], [PowerDevices]: the configuration's
// power devices, read or switched by hand with the fencer's drivers).
// cmd/fenced only wires flags, configuration and clients to it.
//
// These commands are the human side of the safety invariant (docs/design.md §2).
// confirm is the only way to `manual` evidence: it records who confirmed and
// why, and refuses when the BMC reads the power as on. unfence removes only
// taints fenced applied, and only after the same checks the fencer makes
// (Ready, new boot ID, no VolumeAttachment left) unless forced, which is
// recorded. status only reads. diagnose reads, and with --fix deletes a
// VolumeAttachment only when pkg/diagnose's StaleAttachment, run again on
// objects read right before, allows it, with preconditions on the object.
//
// bmc, device and topology check bypass every safety check of the fencer:
// they do what the operator asks, and say what the hardware answered.
//
// The taint itself is always written through pkg/taint, which re-checks the
// evidence against the Node; nothing here writes a Node directly.
package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
)

// ErrRefused is wrapped by the errors of Confirm and Unfence when they
// decline to act for a safety reason (BMC reads on, checks failed, not
// confirmed, a taint fenced did not apply), as opposed to failing.
var ErrRefused = errors.New("refused")

// UnknownIdentity is recorded as the operator when the API server does not
// say who the caller is.
const UnknownIdentity = "unknown"

// Inventory is where the commands find a node's BMC. *device.Inventory
// implements it; tests use fakes.
type Inventory interface {
	BMC(node string) (device.BMC, bool)
	Endpoint(node string) (string, bool)
}

// Operator runs the operator commands against one cluster.
type Operator struct {
	// Client talks to the API server with the operator's credentials.
	Client kubernetes.Interface
	// Inventory holds the BMCs; nil when none is configured.
	Inventory Inventory
	// Recorder receives the Events written on Nodes; nil means none.
	Recorder record.EventRecorder
	// Out receives the human-readable report and the prompt.
	Out io.Writer
	// Log receives the log lines that must outlive the terminal (forced
	// unfence, identity fallback); nil discards them.
	Log *slog.Logger
	// Verify bounds confirm --power-off.
	Verify device.VerifyOptions
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// LeaseNamespace is fenced's namespace (fencer.leaseNamespace of the
	// configuration, as the agents use it), where diagnose reads the
	// agents' Leases fenced-agent-<node>; empty: not read.
	LeaseNamespace string

	// closeInventory closes the inventory NewOperator opened; nil: none.
	closeInventory func() error
}

// NewOperator builds what confirm, unfence, status and diagnose share
// from the configuration: its BMC inventory if it has one, the agents'
// Lease namespace, the bound of confirm --power-off. Close it when done.
func NewOperator(cfg *config.Config, client kubernetes.Interface, out io.Writer, log *slog.Logger) (*Operator, error) {
	// The agents' Leases are where the agents put them: fencer.leaseNamespace,
	// whose default applies also when there is no configuration file.
	leaseNS := cfg.Fencer.LeaseNamespace
	if leaseNS == "" {
		leaseNS = config.DefaultLeaseNamespace
	}
	o := &Operator{Client: client, Out: out, Log: log, LeaseNamespace: leaseNS,
		Verify: device.VerifyOptions{Timeout: cfg.Fencer.PowerTimeout}}
	if len(cfg.BMCs) > 0 {
		inv, err := device.NewInventory(cfg, log)
		if err != nil {
			return nil, err
		}
		o.Inventory, o.closeInventory = inv, inv.Close
	}
	return o, nil
}

// Close closes the BMC sessions of the inventory NewOperator opened.
func (o *Operator) Close() {
	if o.closeInventory != nil {
		_ = o.closeInventory()
	}
}

func (o *Operator) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Operator) log() *slog.Logger {
	if o.Log != nil {
		return o.Log
	}
	return slog.New(slog.DiscardHandler)
}

// warn records a Warning Event on the node, if there is a Recorder.
func (o *Operator) warn(n *corev1.Node, reason vocab.EventReason, format string, args ...any) {
	o.record(n, corev1.EventTypeWarning, reason, format, args...)
}

// record records an Event on a Node or a ConfigMap (the pause), if there is
// a Recorder.
func (o *Operator) record(obj metav1.Object, eventType string, reason vocab.EventReason, format string, args ...any) {
	if o.Recorder == nil {
		return
	}
	// A reference rather than the object, as pkg/taint does, so that any
	// recorder, whatever scheme it was built with, can use it.
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: obj.GetName(), Namespace: obj.GetNamespace(), UID: obj.GetUID()}
	if _, ok := obj.(*corev1.ConfigMap); ok {
		ref.Kind = "ConfigMap"
	}
	o.Recorder.Eventf(ref, eventType, string(reason), format, args...)
}

// bmc returns node's BMC and endpoint, if an inventory has it.
func (o *Operator) bmc(node string) (device.BMC, string, bool) {
	if o.Inventory == nil {
		return nil, "", false
	}
	b, ok := o.Inventory.BMC(node)
	if !ok {
		return nil, "", false
	}
	ep, _ := o.Inventory.Endpoint(node)
	return b, ep, true
}

// identity asks the API server who the caller is: the name recorded as the
// operator's must be the one the cluster authenticated, not one the caller
// typed. An API server that refuses (old version, RBAC) is no reason to stop
// an operator at 3 a.m., so the fallback is "unknown", said out loud.
//
// The question is bounded by identityTimeout: a command that switches a
// machine off by hand must not hang on an API server that does not answer.
func (o *Operator) identity(ctx context.Context) string {
	if o.Client == nil {
		return o.unknownIdentity(errors.New("no connection to the API server"))
	}
	ctx, cancel := context.WithTimeout(ctx, identityTimeout)
	defer cancel()
	r, err := o.Client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err == nil && r.Status.UserInfo.Username != "" {
		return r.Status.UserInfo.Username
	}
	if err == nil {
		err = errors.New("the API server returned no user name")
	}
	return o.unknownIdentity(err)
}

// identityTimeout bounds identity's question.
const identityTimeout = 10 * time.Second

// unknownIdentity says out loud that the caller will be recorded as
// UnknownIdentity, and why.
func (o *Operator) unknownIdentity(err error) string {
	fmt.Fprintf(o.Out, "WARNING: could not ask the API server who you are (%v); you will be recorded as %q\n", err, UnknownIdentity)
	o.log().Warn("SelfSubjectReview failed; recording the operator as unknown", "err", err)
	return UnknownIdentity
}

// getNode reads the Node a command names; one that does not exist is
// ErrUnknownNode, a wrong argument.
func (o *Operator) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := o.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w %q: no such Node", ErrUnknownNode, name)
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	return n, nil
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// age is a duration as kubectl prints ages ("3m", "5h2m"), or "-".
func age(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t))
}

// taintsText lists a node's taints as kubectl's --overwrite syntax spells
// them, so that an operator can copy one.
func taintsText(n *corev1.Node) string {
	if len(n.Spec.Taints) == 0 {
		return "(none)"
	}
	var parts []string
	for _, t := range n.Spec.Taints {
		s := t.Key
		if t.Value != "" {
			s += "=" + t.Value
		}
		parts = append(parts, s+":"+string(t.Effect))
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "(not reported)"
	}
	return s
}

// kindOf names a BMC failure for a table cell: the driver's ErrorKind, or
// "error" for anything it did not classify.
func kindOf(err error) string {
	if k := device.KindOf(err); k != "" {
		return string(k)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return string(vocab.KindTimeout)
	}
	return "error"
}
