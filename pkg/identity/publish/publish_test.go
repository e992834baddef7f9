package publish

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/vocab"
)

func TestPublishAndRead(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	k1, _ := identity.NewKey()
	k2, _ := identity.NewKey()
	now := time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	for i, k := range []*identity.Key{k1, k2} { // create, then replace after a restart
		if err := Publish(ctx, client, "fenced-system", "node-a", "boot-1", k.Public(), now.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := client.CoordinationV1().Leases("fenced-system").Get(ctx, LeaseName("node-a"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromLease(l)
	if err != nil {
		t.Fatal(err)
	}
	if got.Node != "node-a" || got.BootID != "boot-1" || got.Key.String() != k2.Public().String() || !got.At.Equal(now.Add(time.Minute)) {
		t.Fatalf("read back %+v", got)
	}
}

func TestFromLeaseRefusesMalformed(t *testing.T) {
	k, _ := identity.NewKey()
	good := func() *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "fenced-agent-node-a",
				Annotations: map[string]string{AnnotationPublicKey: k.Public().String(), AnnotationBootID: "boot-1"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a")},
		}
	}
	cases := map[string]func(*coordinationv1.Lease){
		"not a key Lease":    func(l *coordinationv1.Lease) { l.Name = "fenced-power-node-a" },
		"no boot ID":         func(l *coordinationv1.Lease) { delete(l.Annotations, AnnotationBootID) },
		"another holder":     func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("node-b") },
		"no holder":          func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil },
		"malformed key":      func(l *coordinationv1.Lease) { l.Annotations[AnnotationPublicKey] = "ed25519:AAAA" },
		"no key":             func(l *coordinationv1.Lease) { delete(l.Annotations, AnnotationPublicKey) },
		"prefix only (name)": func(l *coordinationv1.Lease) { l.Name = LeasePrefix },
	}
	if _, err := FromLease(good()); err != nil {
		t.Fatalf("good Lease refused: %v", err)
	}
	for name, breakIt := range cases {
		l := good()
		breakIt(l)
		if _, err := FromLease(l); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// policyCase is an installed policy and binding, made from the shipped
// ones by edit, and what PolicyInForce must say of them ("" = in force).
type policyCase struct {
	name string
	edit func(*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	want string
}

// testNamespace is where the key Leases are in these tests.
const testNamespace = "fenced-test"

// policyCases: the shipped objects, harmless variations, and every way a
// policy of the right names can stop guarding the key Leases.
func policyCases() []policyCase {
	type (
		vap  = admissionregistrationv1.ValidatingAdmissionPolicy
		vapb = admissionregistrationv1.ValidatingAdmissionPolicyBinding
	)
	return []policyCase{
		{"shipped", func(*vap, *vapb) {}, ""},
		{"an extra validation", func(p *vap, _ *vapb) {
			p.Spec.Validations = append(p.Spec.Validations, admissionregistrationv1.Validation{Expression: "true"})
		}, ""},
		{"selector by expression", func(_ *vap, b *vapb) {
			b.Spec.MatchResources.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{"other", testNamespace}}}}
		}, ""},
		{"binding covers every namespace", func(_ *vap, b *vapb) { b.Spec.MatchResources = nil }, ""},
		{"renamed but empty", func(p *vap, _ *vapb) {
			p.Spec = admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
				Validations: []admissionregistrationv1.Validation{{Expression: "true"}}}
		}, "do not cover"},
		{"audit only", func(_ *vap, b *vapb) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
		}, "does not deny"},
		{"warn only", func(_ *vap, b *vapb) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
		}, "does not deny"},
		{"wrong namespace", func(_ *vap, b *vapb) {
			b.Spec.MatchResources.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] = "default"
		}, "does not select namespace " + testNamespace},
		{"selector on another label", func(_ *vap, b *vapb) {
			b.Spec.MatchResources.NamespaceSelector.MatchLabels["team"] = "fenced"
		}, "uses label team"},
		{"policy limited to another namespace", func(p *vap, _ *vapb) {
			p.Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "default"}}
		}, "does not select namespace " + testNamespace},
		{"object selector", func(_ *vap, b *vapb) {
			b.Spec.MatchResources.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"checked": "yes"}}
		}, "objectSelector"},
		{"rules stripped", func(p *vap, _ *vapb) {
			p.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "true"}}
		}, "lacks the validation"},
		{"one rule stripped", func(p *vap, _ *vapb) { p.Spec.Validations = p.Spec.Validations[1:] }, "lacks the validation"},
		{"variable redefined", func(p *vap, _ *vapb) {
			for i := range p.Spec.Variables {
				if p.Spec.Variables[i].Name == "node" {
					p.Spec.Variables[i].Expression = "has(object.spec) && has(object.spec.holderIdentity) ? object.spec.holderIdentity : ''"
				}
			}
		}, "variable node"},
		{"match condition narrows", func(p *vap, _ *vapb) {
			p.Spec.MatchConditions = append(p.Spec.MatchConditions, admissionregistrationv1.MatchCondition{Name: "never", Expression: "false"})
		}, "matchConditions"},
		{"updates not matched", func(p *vap, _ *vapb) {
			p.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
		}, "do not cover"},
		{"one Lease name only", func(p *vap, _ *vapb) {
			p.Spec.MatchConstraints.ResourceRules[0].ResourceNames = []string{"fenced-agent-node-a"}
		}, "do not cover"},
		{"binding narrows the resources", func(_ *vap, b *vapb) {
			b.Spec.MatchResources.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}}}}}
		}, "do not cover"},
		{"leases excluded", func(p *vap, _ *vapb) {
			p.Spec.MatchConstraints.ExcludeResourceRules = p.Spec.MatchConstraints.ResourceRules
		}, "excludes"},
		{"exact match policy", func(p *vap, _ *vapb) {
			p.Spec.MatchConstraints.MatchPolicy = ptr.To(admissionregistrationv1.Exact)
		}, "matchPolicy Exact"},
		{"failure policy Ignore", func(p *vap, _ *vapb) {
			p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}, "failurePolicy"},
		{"binding of another policy", func(_ *vap, b *vapb) { b.Spec.PolicyName = "something-else" }, "binds policy"},
	}
}

// shippedFor: the shipped objects for namespace ns.
func shippedFor(t *testing.T, ns string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	p, b, err := ShippedFor(ns)
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

// checkPolicyCase installs c's objects through client and checks what
// PolicyInForce says.
func checkPolicyCase(ctx context.Context, t *testing.T, client kubernetes.Interface, c policyCase) {
	t.Helper()
	adm := client.AdmissionregistrationV1()
	p, b := shippedFor(t, testNamespace)
	c.edit(p, b)
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the policy: %v", err)
	}
	t.Cleanup(func() {
		_ = adm.ValidatingAdmissionPolicies().Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	})
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the binding: %v", err)
	}
	t.Cleanup(func() {
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
	})
	err := PolicyInForce(ctx, client, testNamespace)
	if c.want == "" {
		if err != nil {
			t.Fatalf("PolicyInForce = %v, want in force", err)
		}
		return
	}
	if !errors.Is(err, ErrPolicyNotInForce) || !strings.Contains(err.Error(), c.want) {
		t.Fatalf("PolicyInForce = %v, want ErrPolicyNotInForce mentioning %q", err, c.want)
	}
	t.Logf("refused: %v", err)
}

// TestPolicyInForce runs policyCases on a fake client (no defaults, no
// validation); TestPolicyInForceAPIServer runs them on a real one.
func TestPolicyInForce(t *testing.T) {
	for _, c := range policyCases() {
		t.Run(c.name, func(t *testing.T) { checkPolicyCase(context.Background(), t, fake.NewClientset(), c) })
	}
	t.Run("missing", func(t *testing.T) {
		client := fake.NewClientset()
		if err := PolicyInForce(context.Background(), client, testNamespace); !errors.Is(err, ErrPolicyNotInForce) {
			t.Fatalf("PolicyInForce with nothing installed = %v", err)
		}
		p, _ := shippedFor(t, testNamespace)
		if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := PolicyInForce(context.Background(), client, testNamespace); !errors.Is(err, ErrPolicyNotInForce) || !strings.Contains(err.Error(), "Binding") {
			t.Fatalf("PolicyInForce without the binding = %v", err)
		}
	})
}

// TestPublishGracefulShutdown: the word rides on the key Lease, survives a
// key re-publish, and reads back; a Lease that is not a node's own key
// Lease says nothing; before the key is published there is no Lease to
// write on.
func TestPublishGracefulShutdown(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	if err := PublishGracefulShutdown(ctx, client, "fenced-system", "node-a", vocab.GracefulNone); err == nil {
		t.Fatal("published on a Lease that does not exist")
	}
	k, _ := identity.NewKey()
	if err := Publish(ctx, client, "fenced-system", "node-a", "boot-1", k.Public(), time.Now()); err != nil {
		t.Fatal(err)
	}
	read := func() (string, vocab.GracefulShutdown, bool) {
		t.Helper()
		l, err := client.CoordinationV1().Leases("fenced-system").Get(ctx, LeaseName("node-a"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return GracefulShutdownOf(l)
	}
	if n, g, ok := read(); !ok || n != "node-a" || g != vocab.GracefulUnknown {
		t.Fatalf("before any check: %s %s %v, want node-a unknown", n, g, ok)
	}
	for _, g := range []vocab.GracefulShutdown{vocab.GracefulNone, vocab.GracefulKubeletDelayLock, vocab.GracefulNone} {
		if err := PublishGracefulShutdown(ctx, client, "fenced-system", "node-a", g); err != nil {
			t.Fatal(err)
		}
		if n, got, ok := read(); !ok || n != "node-a" || got != g {
			t.Fatalf("published %s, read %s %s %v", g, n, got, ok)
		}
	}
	if err := Publish(ctx, client, "fenced-system", "node-a", "boot-2", k.Public(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, g, _ := read(); g != vocab.GracefulNone {
		t.Fatalf("after re-publishing the key: %s, want none kept", g)
	}
	for _, l := range []*coordinationv1.Lease{
		{ObjectMeta: metav1.ObjectMeta{Name: "fenced-power-node-a"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a")}},
		{ObjectMeta: metav1.ObjectMeta{Name: LeaseName("node-a"), Annotations: map[string]string{AnnotationGracefulShutdown: "none"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-b")}},
	} {
		if n, g, ok := GracefulShutdownOf(l); ok {
			t.Errorf("Lease %s held by %v: %s %s, want nothing", l.Name, *l.Spec.HolderIdentity, n, g)
		}
	}
	bad := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName("node-a"), Annotations: map[string]string{AnnotationGracefulShutdown: "maybe"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a")}}
	if _, g, ok := GracefulShutdownOf(bad); !ok || g != vocab.GracefulUnknown {
		t.Errorf("a word not in the vocabulary: %s %v, want unknown", g, ok)
	}
}

// TestWithdraw: an agent takes only its own key off its Lease; the Lease
// then publishes no key (ErrKeyWithdrawn), until a new run publishes one.
func TestWithdraw(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	k1, _ := identity.NewKey()
	k2, _ := identity.NewKey()
	now := time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	if withdrawn, err := Withdraw(ctx, client, "fenced-system", "node-a", k1.Public()); withdrawn || err != nil {
		t.Fatalf("withdrawing from no Lease: %v, %v", withdrawn, err)
	}
	if err := Publish(ctx, client, "fenced-system", "node-a", "boot-1", k1.Public(), now); err != nil {
		t.Fatal(err)
	}
	// Another run's key is not this run's to withdraw.
	if withdrawn, err := Withdraw(ctx, client, "fenced-system", "node-a", k2.Public()); withdrawn || err != nil {
		t.Fatalf("withdrawing another key: %v, %v", withdrawn, err)
	}
	if got, err := Read(ctx, client, "fenced-system", "node-a"); err != nil || got.Key.String() != k1.Public().String() {
		t.Fatalf("after withdrawing another key: %+v, %v; want k1 still published", got, err)
	}
	if withdrawn, err := Withdraw(ctx, client, "fenced-system", "node-a", k1.Public()); !withdrawn || err != nil {
		t.Fatalf("withdrawing k1: %v, %v", withdrawn, err)
	}
	if got, err := Read(ctx, client, "fenced-system", "node-a"); !errors.Is(err, ErrKeyWithdrawn) {
		t.Fatalf("after withdrawing k1: %+v, %v; want ErrKeyWithdrawn", got, err)
	}
	l, err := client.CoordinationV1().Leases("fenced-system").Get(ctx, LeaseName("node-a"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "node-a" || l.Annotations[AnnotationBootID] != "boot-1" {
		t.Fatalf("the withdrawal changed more than the key: %+v", l)
	}
	if err := Publish(ctx, client, "fenced-system", "node-a", "boot-1", k2.Public(), now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(ctx, client, "fenced-system", "node-a"); err != nil || got.Key.String() != k2.Public().String() {
		t.Fatalf("after the next run published: %+v, %v; want k2", got, err)
	}
}
