package publish

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"fenced.io/fenced/pkg/identity"
)

var testArmed = identity.Armed{Timeout: 10 * time.Second, Confirm: 30 * time.Second, Device: "i6300ESB timer"}

// TestArmedStatement: an agent's armed statement reads back as it was
// signed; changed in any field, signed with another key, for another boot,
// or left over from an earlier run, it is refused.
func TestArmedStatement(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	key, _ := identity.NewKey()
	if err := Publish(ctx, client, "fenced-system", "node-a", "boot-1", key.Public(), time.Now()); err != nil {
		t.Fatal(err)
	}
	lease := func() *coordinationv1.Lease {
		l, err := client.CoordinationV1().Leases("fenced-system").Get(ctx, LeaseName("node-a"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if _, _, err := ArmedOf(lease()); !errors.Is(err, ErrNotArmed) {
		t.Fatalf("before the statement: %v, want ErrNotArmed", err)
	}
	if err := PublishArmed(ctx, client, "fenced-system", "node-a", "boot-1", key, testArmed); err != nil {
		t.Fatal(err)
	}
	boot, a, err := ArmedOf(lease())
	if err != nil || boot != "boot-1" || a != testArmed {
		t.Fatalf("ArmedOf = %s, %+v, %v", boot, a, err)
	}

	tampered := map[string]func(*armedAnnotation){
		"a longer confirm":       func(s *armedAnnotation) { s.Confirm = "60s" },
		"a shorter timeout":      func(s *armedAnnotation) { s.Timeout = "5s" },
		"another device":         func(s *armedAnnotation) { s.Device = "iTCO_wdt" },
		"hardware, not software": func(s *armedAnnotation) { s.Software = true },
		"another boot":           func(s *armedAnnotation) { s.BootID = "boot-0" },
		"no signature":           func(s *armedAnnotation) { s.Sig = nil },
		"zero timeout":           func(s *armedAnnotation) { s.Timeout = "0s" },
		"no duration":            func(s *armedAnnotation) { s.Confirm = "soon" },
	}
	for name, change := range tampered {
		l := lease()
		var s armedAnnotation
		if err := json.Unmarshal([]byte(l.Annotations[AnnotationWatchdogArmed]), &s); err != nil {
			t.Fatal(err)
		}
		change(&s)
		raw, _ := json.Marshal(s)
		l.Annotations[AnnotationWatchdogArmed] = string(raw)
		if _, _, err := ArmedOf(l); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Signed with a key that is not the one the Lease publishes: a
	// statement copied from another node, or made by a key holder who
	// cannot write this Lease.
	other, _ := identity.NewKey()
	l := lease()
	forged := identity.Statement{Kind: identity.KindArmed, Node: "node-a", BootID: "boot-1", Armed: testArmed}
	raw, _ := json.Marshal(armedAnnotation{BootID: "boot-1", Timeout: "10s", Confirm: "30s", Device: testArmed.Device, Sig: other.Sign(forged)})
	l.Annotations[AnnotationWatchdogArmed] = string(raw)
	if _, _, err := ArmedOf(l); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("signed with another key: %v", err)
	}

	// A new run publishes its own key: the earlier run's statement goes.
	next, _ := identity.NewKey()
	if err := Publish(ctx, client, "fenced-system", "node-a", "boot-1", next.Public(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ArmedOf(lease()); !errors.Is(err, ErrNotArmed) {
		t.Fatalf("after a new run's key: %v, want ErrNotArmed", err)
	}
	// Stated, then withdrawn (a clean shutdown): none.
	if err := PublishArmed(ctx, client, "fenced-system", "node-a", "boot-1", next, testArmed); err != nil {
		t.Fatal(err)
	}
	if err := WithdrawArmed(ctx, client, "fenced-system", "node-a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ArmedOf(lease()); !errors.Is(err, ErrNotArmed) {
		t.Fatalf("after WithdrawArmed: %v, want ErrNotArmed", err)
	}
}

// TestFenceOrder: an order is written for a boot, read back, left alone
// when written again for the same boot, replaced for another, and withdrawn
// only for the boot it names.
func TestFenceOrder(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	const ns = "fenced-system"
	if _, found, err := ReadOrder(ctx, client, ns, "node-a"); found || err != nil {
		t.Fatalf("no order yet: %v, %v", found, err)
	}
	if err := WriteOrder(ctx, client, ns, "node-a", "boot-1", "cp-1"); err != nil {
		t.Fatal(err)
	}
	o, found, err := ReadOrder(ctx, client, ns, "node-a")
	if !found || err != nil || o.BootID != "boot-1" || o.By != "cp-1" || o.Node != "node-a" {
		t.Fatalf("ReadOrder = %+v, %v, %v", o, found, err)
	}
	if err := WriteOrder(ctx, client, ns, "node-a", "boot-1", "cp-2"); err != nil {
		t.Fatal(err)
	}
	if again, _, _ := ReadOrder(ctx, client, ns, "node-a"); again.By != "cp-1" {
		t.Errorf("written again for the same boot: %+v, want it left as it was", again)
	}
	if withdrawn, err := WithdrawOrder(ctx, client, ns, "node-a", "boot-0"); withdrawn || err != nil {
		t.Errorf("withdrawing another boot's order: %v, %v", withdrawn, err)
	}
	if err := WriteOrder(ctx, client, ns, "node-a", "boot-2", "cp-2"); err != nil {
		t.Fatal(err)
	}
	if o, _, _ := ReadOrder(ctx, client, ns, "node-a"); o.BootID != "boot-2" || o.By != "cp-2" {
		t.Errorf("an order for another boot: %+v", o)
	}
	if withdrawn, err := WithdrawOrder(ctx, client, ns, "node-a", "boot-2"); !withdrawn || err != nil {
		t.Errorf("WithdrawOrder = %v, %v", withdrawn, err)
	}
	if _, found, err := ReadOrder(ctx, client, ns, "node-a"); found || err != nil {
		t.Fatalf("after WithdrawOrder: %v, %v", found, err)
	}
}

// TestOrderPolicyInForce: the fence orders' policy counts only as shipped:
// missing, its binding missing, or with its one validation gone, it is not
// in force; and it is its own, so the key Leases' policy alone does not
// make it.
func TestOrderPolicyInForce(t *testing.T) {
	ctx := context.Background()
	const ns = "fenced-system"
	policy, binding, err := ShippedFor(ns)
	if err != nil {
		t.Fatal(err)
	}
	orders, orderBinding, err := OrderPolicyFor(ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := OrderPolicyInForce(ctx, fake.NewClientset(policy, binding), ns); !errors.Is(err, ErrPolicyNotInForce) {
		t.Errorf("with the key Leases' policy alone: %v", err)
	}
	if err := OrderPolicyInForce(ctx, fake.NewClientset(orders), ns); !errors.Is(err, ErrPolicyNotInForce) {
		t.Errorf("without its binding: %v", err)
	}
	if err := OrderPolicyInForce(ctx, fake.NewClientset(orders, orderBinding), ns); err != nil {
		t.Errorf("as shipped: %v", err)
	}
	weak := orders.DeepCopy()
	weak.Spec.Validations = nil
	if err := OrderPolicyInForce(ctx, fake.NewClientset(weak, orderBinding), ns); err == nil || !strings.Contains(err.Error(), "lacks the validation") {
		t.Errorf("without its validation: %v", err)
	}
	elsewhere, otherBinding, _ := OrderPolicyFor("default")
	if err := OrderPolicyInForce(ctx, fake.NewClientset(elsewhere, otherBinding), ns); !errors.Is(err, ErrPolicyNotInForce) {
		t.Errorf("bound to another namespace: %v", err)
	}
}
