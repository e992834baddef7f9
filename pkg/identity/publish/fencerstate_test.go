package publish

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/vocab"
)

// TestFencerState: a fencer's state goes on its key Lease with the
// renewal, keeps the key, reads back; a new run's Publish takes it off (an
// observer now, or a fencer that has not said yet); without a key Lease
// nothing is created.
func TestFencerState(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	const ns = "fenced-system"
	t0 := time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	st := FencerState{Ready: true, Mode: vocab.ModePowerOff, DryRun: true, InventoryNodes: 7, ConfigHash: "0a1b2c3d4e5f"}

	if err := PublishFencerState(ctx, client, ns, "node-a", st, t0); !errors.Is(err, ErrNoKeyLease) {
		t.Fatalf("without a key Lease: %v, want ErrNoKeyLease", err)
	}
	k, _ := identity.NewKey()
	if err := Publish(ctx, client, ns, "node-a", "boot-1", k.Public(), t0); err != nil {
		t.Fatal(err)
	}
	read := func() (*coordinationv1.Lease, string, FencerState, time.Time, bool) {
		t.Helper()
		l, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName("node-a"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node, s, renewed, ok := FencerStateOf(l)
		return l, node, s, renewed, ok
	}
	if _, _, _, _, ok := read(); ok {
		t.Fatal("a Lease with only a key reads as a fencer's state")
	}
	for i, want := range []FencerState{st, {Ready: true, Mode: vocab.ModeConfirmOnly, InventoryNodes: 3}} {
		at := t0.Add(time.Duration(i+1) * time.Minute)
		if err := PublishFencerState(ctx, client, ns, "node-a", want, at); err != nil {
			t.Fatal(err)
		}
		l, node, got, renewed, ok := read()
		if !ok || node != "node-a" || got != want || !renewed.Equal(at) {
			t.Errorf("write %d: read back %v %q %+v renewed %v, want %+v renewed %v", i, ok, node, got, renewed, want, at)
		}
		if key, err := FromLease(l); err != nil || key.Key.String() != k.Public().String() {
			t.Errorf("write %d: the key is not kept: %+v, %v", i, key, err)
		}
	}
	// The next run publishes its key: the last run's state is gone.
	if err := Publish(ctx, client, ns, "node-a", "boot-1", k.Public(), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, _, s, _, ok := read(); ok {
		t.Errorf("after a new run's Publish the state of the last run is still there: %+v", s)
	}
}

// TestFencerStateOfRefuses: only a key Lease held by its node, with a
// state, reads as a fencer's state.
func TestFencerStateOfRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    coordinationv1.Lease
	}{
		{"a power Lease", coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "fenced-power-node-a",
			Annotations: map[string]string{AnnotationFencerReady: "true"}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a")}}},
		{"another holder", coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "fenced-agent-node-a",
			Annotations: map[string]string{AnnotationFencerReady: "true"}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-b")}}},
		{"an observer's", coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "fenced-agent-node-a",
			Annotations: map[string]string{AnnotationBootID: "b"}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, s, _, ok := FencerStateOf(&tc.l); ok {
				t.Errorf("read as a fencer's state: %+v", s)
			}
		})
	}
}
