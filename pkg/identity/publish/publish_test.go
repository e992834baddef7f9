package publish

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

func TestPolicyInForce(t *testing.T) {
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: ptr.To(admissionregistrationv1.Fail)}}
	binding := func(actions ...admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: PolicyName, ValidationActions: actions}}
	}
	ignore := policy.DeepCopy()
	ignore.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	cases := []struct {
		name string
		objs []any
		want string // "" = in force
	}{
		{"policy and denying binding", []any{policy, binding(admissionregistrationv1.Deny)}, ""},
		{"no policy", []any{binding(admissionregistrationv1.Deny)}, "ValidatingAdmissionPolicy"},
		{"no binding", []any{policy}, "Binding"},
		{"binding only warns", []any{policy, binding(admissionregistrationv1.Warn)}, "does not deny"},
		{"failure policy Ignore", []any{ignore, binding(admissionregistrationv1.Deny)}, "failurePolicy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client := fake.NewClientset()
			for _, o := range c.objs {
				switch o := o.(type) {
				case *admissionregistrationv1.ValidatingAdmissionPolicy:
					_, _ = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
				case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
					_, _ = client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
				}
			}
			err := PolicyInForce(ctx, client)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrPolicyNotInForce) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrPolicyNotInForce mentioning %q", err, c.want)
			}
		})
	}
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
