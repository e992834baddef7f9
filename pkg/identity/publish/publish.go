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
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/deploy"
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
		// An earlier run's fencer state is not this run's: a fencer
		// publishes its own once it runs (PublishFencerState).
		for _, a := range fencerStateAnnotations {
			delete(l.Annotations, a)
		}
		// Nor is its armed statement, signed with its key: this run
		// states its own once it has armed (PublishArmed).
		delete(l.Annotations, AnnotationWatchdogArmed)
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
	return setKeyLeaseAnnotation(ctx, client, ns, node, AnnotationGracefulShutdown, string(g))
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
// policy that binds keys to nodes is missing, does not deny, or does not
// cover the key Leases with the shipped rules.
var ErrPolicyNotInForce = errors.New("the agent identity admission policy is not in force")

// PolicyInForce checks that the ValidatingAdmissionPolicy PolicyName and its
// binding are installed and enforce what the shipped file
// (deploy/daemonset/base/agent-identity-policy.yaml) enforces on the key
// Leases in namespace ns: without that any agent could publish a key in
// another node's name, and no node's signed word would mean anything. Names
// alone prove nothing: a policy of that name that matches no Lease, whose
// rules were stripped, or whose binding only audits or covers another
// namespace, guards nothing. The error names every difference found.
func PolicyInForce(ctx context.Context, client kubernetes.Interface, ns string) error {
	return inForce(ctx, client, ns, PolicyName, ShippedPolicy)
}

// OrderPolicyName is the ValidatingAdmissionPolicy (and its binding) that
// lets only fencers write or delete fence orders (order.go).
const OrderPolicyName = "fenced-fence-orders"

// OrderPolicyInForce checks, as PolicyInForce does for the key Leases,
// that the policy OrderPolicyName and its binding enforce what the shipped
// file (deploy/daemonset/base/fence-order-policy.yaml) enforces on the
// fence orders in namespace ns: without it any agent could order a node's
// reset or take an order back, and no fence order could be counted on.
func OrderPolicyInForce(ctx context.Context, client kubernetes.Interface, ns string) error {
	return inForce(ctx, client, ns, OrderPolicyName, ShippedOrderPolicy)
}

// inForce checks that the installed policy name and its binding enforce
// what shipped's enforces in namespace ns; errors wrap ErrPolicyNotInForce.
func inForce(ctx context.Context, client kubernetes.Interface, ns, name string, shippedOf func() (Shipped, error)) error {
	shipped, err := shippedOf()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPolicyNotInForce, err)
	}
	adm := client.AdmissionregistrationV1()
	p, err := adm.ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%w: ValidatingAdmissionPolicy %s: %v", ErrPolicyNotInForce, name, err)
	}
	b, err := adm.ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%w: ValidatingAdmissionPolicyBinding %s: %v", ErrPolicyNotInForce, name, err)
	}
	problems := append(policyProblems(name, &p.Spec, &shipped.Policy.Spec, ns), bindingProblems(name, &b.Spec, &shipped.Policy.Spec, ns)...)
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrPolicyNotInForce, strings.Join(problems, "; "))
	}
	return nil
}

// Shipped is the policy and binding the deployment ships.
type Shipped struct {
	Policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	Binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// ShippedPolicy decodes deploy.AgentIdentityPolicy (built into the binary).
var ShippedPolicy = sync.OnceValues(func() (Shipped, error) {
	return shippedFrom("deploy/daemonset/base/agent-identity-policy.yaml", deploy.AgentIdentityPolicy)
})

// ShippedOrderPolicy decodes deploy.FenceOrderPolicy (built into the binary).
var ShippedOrderPolicy = sync.OnceValues(func() (Shipped, error) {
	return shippedFrom("deploy/daemonset/base/fence-order-policy.yaml", deploy.FenceOrderPolicy)
})

// shippedFrom decodes a file of one policy and its binding.
func shippedFrom(file string, data []byte) (Shipped, error) {
	var s Shipped
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Shipped{}, fmt.Errorf("%s: %w", file, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return Shipped{}, fmt.Errorf("%s: %w", file, err)
		}
		switch o := obj.(type) {
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			s.Policy = o
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			s.Binding = o
		default:
			return Shipped{}, fmt.Errorf("%s: unexpected %T", file, obj)
		}
	}
	if s.Policy == nil || s.Binding == nil {
		return Shipped{}, fmt.Errorf("%s: want a ValidatingAdmissionPolicy and its binding", file)
	}
	return s, nil
}

// ShippedFor returns copies of the shipped policy and binding with the
// binding moved to namespace ns, as kustomize's namespace transformer
// moves it: what an install whose key Leases are in ns applies.
func ShippedFor(ns string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	return shippedIn(ShippedPolicy, ns)
}

// OrderPolicyFor is ShippedFor for the fence orders' policy.
func OrderPolicyFor(ns string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	return shippedIn(ShippedOrderPolicy, ns)
}

func shippedIn(shippedOf func() (Shipped, error), ns string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	s, err := shippedOf()
	if err != nil {
		return nil, nil, err
	}
	p, b := s.Policy.DeepCopy(), s.Binding.DeepCopy()
	if b.Spec.MatchResources == nil || b.Spec.MatchResources.NamespaceSelector == nil ||
		b.Spec.MatchResources.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == "" {
		return nil, nil, fmt.Errorf("binding %s does not select a namespace by its %s label", b.Name, corev1.LabelMetadataName)
	}
	b.Spec.MatchResources.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] = ns
	// Cluster-scoped: kustomize's namespace means nothing here.
	p.Namespace, b.Namespace = "", ""
	return p, b, nil
}

// policyProblems compares an installed policy's spec with the shipped one:
// it must fail closed, match every write the shipped one matches in
// namespace ns (the same resource rules, no exclusions, no object
// selector, the same matchConditions: an extra condition narrows it), and
// define the shipped variables and validations word for word (extra
// validations only deny more, and are allowed).
func policyProblems(name string, got, want *admissionregistrationv1.ValidatingAdmissionPolicySpec, ns string) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, "ValidatingAdmissionPolicy "+name+" "+fmt.Sprintf(format, args...))
	}
	if got.FailurePolicy != nil && *got.FailurePolicy != admissionregistrationv1.Fail {
		add("has failurePolicy %s, want Fail", *got.FailurePolicy)
	}
	if got.MatchConstraints == nil {
		add("has no matchConstraints: it matches no Lease write")
	} else {
		for _, p := range matchProblems(got.MatchConstraints, want.MatchConstraints, ns, false) {
			add("matchConstraints %s", p)
		}
	}
	if !sameExpressions(got.MatchConditions, want.MatchConditions) {
		add("has matchConditions %s, want the shipped %s", expressionsOf(got.MatchConditions), expressionsOf(want.MatchConditions))
	}
	variables := map[string]string{}
	for _, v := range got.Variables {
		variables[v.Name] = normalise(v.Expression)
	}
	for _, v := range want.Variables {
		if e, ok := variables[v.Name]; !ok {
			add("has no variable %s", v.Name)
		} else if e != normalise(v.Expression) {
			add("variable %s is %q, want the shipped %q", v.Name, e, normalise(v.Expression))
		}
	}
	validations := map[string]bool{}
	for _, v := range got.Validations {
		validations[normalise(v.Expression)] = true
	}
	for _, v := range want.Validations {
		if !validations[normalise(v.Expression)] {
			add("lacks the validation %q (%s)", normalise(v.Expression), v.Message)
		}
	}
	return problems
}

// bindingProblems checks an installed binding: it binds PolicyName, denies,
// and selects every Lease write of namespace ns the policy matches (no
// narrower resource rules, no exclusions, no object selector).
func bindingProblems(name string, got *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec, policy *admissionregistrationv1.ValidatingAdmissionPolicySpec, ns string) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, "ValidatingAdmissionPolicyBinding "+name+" "+fmt.Sprintf(format, args...))
	}
	if got.PolicyName != name {
		add("binds policy %q, want %q", got.PolicyName, name)
	}
	if !slices.Contains(got.ValidationActions, admissionregistrationv1.Deny) {
		add("does not deny (validationActions %v, want [Deny])", got.ValidationActions)
	}
	if got.MatchResources != nil {
		for _, p := range matchProblems(got.MatchResources, policy.MatchConstraints, ns, true) {
			add("matchResources %s", p)
		}
	}
	return problems
}

// matchProblems: what keeps m from matching every Lease write in namespace
// ns that want's resource rules name. A binding's matchResources may leave
// its resource rules empty (all that the policy matches).
func matchProblems(m, want *admissionregistrationv1.MatchResources, ns string, emptyRulesMatchAll bool) []string {
	var problems []string
	if p := namespaceSelectorProblem(m.NamespaceSelector, ns); p != "" {
		problems = append(problems, p)
	}
	if m.ObjectSelector != nil && (len(m.ObjectSelector.MatchLabels) > 0 || len(m.ObjectSelector.MatchExpressions) > 0) {
		problems = append(problems, fmt.Sprintf("has an objectSelector (%s): a Lease without those labels is not checked", metav1.FormatLabelSelector(m.ObjectSelector)))
	}
	if len(m.ExcludeResourceRules) > 0 {
		var excluded []string
		for _, r := range m.ExcludeResourceRules {
			excluded = append(excluded, fmt.Sprintf("%v of %v %v in %v", r.Operations, r.Resources, r.APIVersions, r.APIGroups))
		}
		problems = append(problems, "excludes "+strings.Join(excluded, ", "))
	}
	if m.MatchPolicy != nil && *m.MatchPolicy != admissionregistrationv1.Equivalent {
		problems = append(problems, fmt.Sprintf("has matchPolicy %s, want Equivalent (a write through another API version would not be checked)", *m.MatchPolicy))
	}
	if emptyRulesMatchAll && len(m.ResourceRules) == 0 {
		return problems
	}
	for _, w := range want.ResourceRules {
		if !slices.ContainsFunc(m.ResourceRules, func(r admissionregistrationv1.NamedRuleWithOperations) bool { return covers(r, w) }) {
			problems = append(problems, fmt.Sprintf("do not cover %v of %v %v in %v", w.Operations, w.Resources, w.APIVersions, w.APIGroups))
		}
	}
	return problems
}

// covers: every request w matches, r matches too.
func covers(r, w admissionregistrationv1.NamedRuleWithOperations) bool {
	all := func(have, want []string) bool {
		return slices.Contains(have, "*") || !slices.ContainsFunc(want, func(s string) bool { return !slices.Contains(have, s) })
	}
	ops := func(ops []admissionregistrationv1.OperationType) []string {
		s := make([]string, len(ops))
		for i, o := range ops {
			s[i] = string(o)
		}
		return s
	}
	scopeOK := r.Scope == nil || *r.Scope == admissionregistrationv1.AllScopes || *r.Scope == admissionregistrationv1.NamespacedScope
	return len(r.ResourceNames) == 0 && scopeOK &&
		all(r.APIGroups, w.APIGroups) && all(r.APIVersions, w.APIVersions) &&
		all(r.Resources, w.Resources) && all(ops(r.Operations), ops(w.Operations))
}

// namespaceSelectorProblem: why sel does not select namespace ns, or "".
// A fencer may not read Namespaces, so only the label the API server sets
// on every namespace, kubernetes.io/metadata.name, is known: a selector on
// any other label cannot be shown to select ns.
func namespaceSelectorProblem(sel *metav1.LabelSelector, ns string) string {
	if sel == nil {
		return ""
	}
	for k := range sel.MatchLabels {
		if k != corev1.LabelMetadataName {
			return fmt.Sprintf("namespaceSelector %s uses label %s: only a selector on %s can be shown to cover namespace %s",
				metav1.FormatLabelSelector(sel), k, corev1.LabelMetadataName, ns)
		}
	}
	for _, e := range sel.MatchExpressions {
		if e.Key != corev1.LabelMetadataName {
			return fmt.Sprintf("namespaceSelector %s uses label %s: only a selector on %s can be shown to cover namespace %s",
				metav1.FormatLabelSelector(sel), e.Key, corev1.LabelMetadataName, ns)
		}
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return fmt.Sprintf("namespaceSelector: %v", err)
	}
	if !s.Matches(labels.Set{corev1.LabelMetadataName: ns}) {
		return fmt.Sprintf("namespaceSelector %s does not select namespace %s, where the key Leases are", metav1.FormatLabelSelector(sel), ns)
	}
	return ""
}

// sameExpressions: a and b hold the same conditions, by name and expression.
func sameExpressions(a, b []admissionregistrationv1.MatchCondition) bool {
	return slices.Equal(expressionsOf(a), expressionsOf(b))
}

func expressionsOf(cs []admissionregistrationv1.MatchCondition) []string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.Name + ": " + normalise(c.Expression)
	}
	slices.Sort(s)
	return s
}

// normalise a CEL expression's white space: YAML folding and templating
// may break lines differently without changing the expression.
func normalise(expr string) string { return strings.Join(strings.Fields(expr), " ") }
