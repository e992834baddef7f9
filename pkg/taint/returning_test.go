package taint

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

// unschedulableTaint is the node lifecycle controller's taint for a cordon.
var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

// fencedNode is testNode with fenced's out-of-service taint and evidence
// (tainted), fenced's returning record (rec, when not nil), and the cordon c.
func fencedNode(tainted bool, rec *core.Returning, c core.Cordon) *corev1.Node {
	n := testNode("n1")
	if tainted {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintKey, Value: TaintValue, Effect: corev1.TaintEffectNoExecute})
		n.Annotations[AnnotationAppliedBy] = "fencer-a"
		raw, _ := encodeEvidence(bmcEvidence())
		n.Annotations[AnnotationEvidence] = raw
	}
	if rec != nil {
		raw, _ := json.Marshal(rec)
		n.Annotations[AnnotationReturning] = string(raw)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: ReturningTaintKey, Effect: corev1.TaintEffectNoExecute})
	}
	n.Spec.Unschedulable = c.Unschedulable
	if c.Taint {
		n.Spec.Taints = append(n.Spec.Taints, unschedulableTaint)
	}
	return n
}

// TestRemoveSwaps: the out-of-service taint comes off only in one update
// that puts the returning taint on and changes the cordon for the node
// lifecycle controller to answer, and only on a settled cordon.
func TestRemoveSwaps(t *testing.T) {
	mine := &core.Returning{By: "fencer-a", Cordoned: true}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		err     error
		written bool
		// What the write did: the out-of-service taint came off (oos);
		// the cordon left and the record written.
		oos           bool
		unschedulable bool
		rec           core.Returning
	}{
		{name: "not cordoned: fenced cordons", node: fencedNode(true, nil, core.Cordon{}),
			written: true, oos: true, unschedulable: true, rec: core.Returning{Cordoned: true}},
		{name: "cordoned by someone, answered: left cordoned", node: fencedNode(true, nil, core.Cordon{Unschedulable: true, Taint: true}),
			written: true, oos: true, unschedulable: true, rec: core.Returning{UnschedulableTaint: true}},
		{name: "fenced's cordon from an earlier swap: fenced uncordons", node: fencedNode(true, mine, core.Cordon{Unschedulable: true, Taint: true}),
			written: true, oos: true, unschedulable: false, rec: core.Returning{UnschedulableTaint: true}},
		{name: "the probe again: cordoned again", node: fencedNode(false, mine, core.Cordon{}),
			written: true, oos: false, unschedulable: true, rec: core.Returning{Cordoned: true}},
		{name: "swapped already, not answered: nothing (a lagging caller)", node: fencedNode(false, mine, core.Cordon{Unschedulable: true})},
		{name: "swapped already, answered: nothing (a lagging caller)", node: fencedNode(false, mine, core.Cordon{Unschedulable: true, Taint: true})},
		{name: "cordoned, not answered yet", node: fencedNode(true, nil, core.Cordon{Unschedulable: true}), err: ErrCordonUnsettled},
		{name: "uncordoned, not answered yet", node: fencedNode(true, nil, core.Cordon{Taint: true}), err: ErrCordonUnsettled},
		{name: "nothing of fenced's", node: fencedNode(false, nil, core.Cordon{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn, cs, rec := newTainter("fencer-b", tc.node) // any fencer, not only the one that fenced
			before := tc.node.DeepCopy()
			res, err := tn.Remove(context.Background(), "n1", "node is Ready with a new boot ID")
			if !errors.Is(err, tc.err) || tc.err == nil && err != nil {
				t.Fatalf("Remove: %v, want %v", err, tc.err)
			}
			if updates := count(cs, "update", "nodes"); updates != map[bool]int{true: 1, false: 0}[tc.written] {
				t.Fatalf("%d updates, want written=%v", updates, tc.written)
			}
			n := getNode(t, cs, "n1")
			if !tc.written {
				if !HasTaint(n) && HasTaint(before) || n.Spec.Unschedulable != before.Spec.Unschedulable || len(events(rec)) > 0 {
					t.Fatalf("changed without a write: %+v", n.Spec)
				}
				return
			}
			// One write, and in it no out-of-service taint and the returning taint.
			if HasTaint(n) || !HasReturningTaint(n) || AppliedByFenced(n) || n.Annotations[AnnotationEvidence] != "" {
				t.Fatalf("after Remove: taints %+v annotations %v", n.Spec.Taints, n.Annotations)
			}
			if n.Spec.Unschedulable != tc.unschedulable || res.OutOfService != tc.oos || res.Node == nil {
				t.Fatalf("unschedulable %v, result %+v; want %v, oos %v", n.Spec.Unschedulable, res, tc.unschedulable, tc.oos)
			}
			got, ok, err := ReturningOf(n)
			if !ok || err != nil || got.Cordoned != tc.rec.Cordoned || got.UnschedulableTaint != tc.rec.UnschedulableTaint ||
				got.By != "fencer-b" || !got.At.Equal(tn.now()) {
				t.Fatalf("record %+v (%v, %v), want %+v", got, ok, err, tc.rec)
			}
			// Everything else stays: the API server's not-ready taint, the
			// node lifecycle controller's, the other annotations.
			if n.Spec.Taints[0].Key != "node.kubernetes.io/not-ready" || CordonOf(n).Taint != CordonOf(before).Taint ||
				n.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"] != "true" {
				t.Fatalf("other taints or annotations lost: %+v %v", n.Spec.Taints, n.Annotations)
			}
			evs := events(rec)
			if tc.oos != (len(evs) == 1) || tc.oos && (!strings.HasPrefix(evs[0], "Normal "+string(vocab.EventOutOfServiceTaintRemoved)+" ") ||
				!strings.Contains(evs[0], "fencer-a") || !strings.Contains(evs[0], ReturningTaintKey)) {
				t.Fatalf("events %q", evs)
			}
		})
	}
}

func TestRemoveForeign(t *testing.T) {
	n := testNode("n1")
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintKey, Value: TaintValue, Effect: corev1.TaintEffectNoExecute})
	tn, cs, rec := newTainter("fencer-a", n)
	res, err := tn.Remove(context.Background(), "n1", "recovered")
	if res.Node != nil || !errors.Is(err, ErrNotOurs) {
		t.Fatalf("Remove = %+v, %v; want nothing, ErrNotOurs", res, err)
	}
	if !HasTaint(getNode(t, cs, "n1")) || count(cs, "update", "nodes") != 0 || len(events(rec)) != 0 {
		t.Error("foreign taint touched")
	}
}

func TestRemoveCleansStaleAnnotations(t *testing.T) {
	// Someone removed fenced's taint by hand and left the annotations: they
	// must go, or a later operator's taint would look like fenced's.
	n := testNode("n1")
	n.Annotations[AnnotationAppliedBy] = "fencer-a"
	n.Annotations[AnnotationEvidence] = `{"method":"bmc-power-off"}`
	tn, cs, rec := newTainter("fencer-a", n)
	res, err := tn.Remove(context.Background(), "n1", "recovered")
	if err != nil || res.Node != nil {
		t.Fatalf("Remove = %+v, %v; want nothing, nil", res, err)
	}
	got := getNode(t, cs, "n1")
	if AppliedByFenced(got) || got.Annotations[AnnotationEvidence] != "" || HasReturningTaint(got) || got.Spec.Unschedulable {
		t.Errorf("stale annotations kept, or a returning taint without a fence: %v %+v", got.Annotations, got.Spec)
	}
	if len(events(rec)) != 0 {
		t.Error("Event for a taint that was not there")
	}
}

// TestLift: the returning taint comes off only once the node lifecycle
// controller answered the swap's cordon change (ForceLift excepted), with
// fenced's own cordon and nothing else.
func TestLift(t *testing.T) {
	cordoned := &core.Returning{By: "fencer-a", Cordoned: true}          // fenced cordoned
	foreign := &core.Returning{By: "fencer-a", UnschedulableTaint: true} // someone else's cordon
	for _, tc := range []struct {
		name  string
		node  *corev1.Node
		force bool
		err   error
		// lifted: the write took the returning taint off; unschedulable
		// is the cordon after it.
		lifted, unschedulable bool
	}{
		{name: "fenced cordoned, not answered", node: fencedNode(false, cordoned, core.Cordon{Unschedulable: true}), err: ErrNotObserved},
		{name: "fenced cordoned, answered", node: fencedNode(false, cordoned, core.Cordon{Unschedulable: true, Taint: true}), lifted: true},
		{name: "fenced cordoned, someone uncordoned before the answer", node: fencedNode(false, cordoned, core.Cordon{}), err: ErrNotObserved},
		{name: "someone else's cordon, still on", node: fencedNode(false, foreign, core.Cordon{Unschedulable: true, Taint: true}), err: ErrNotObserved},
		{name: "someone else's cordon, lifted and answered", node: fencedNode(false, foreign, core.Cordon{}), lifted: true},
		{name: "someone else's cordon, forced", node: fencedNode(false, foreign, core.Cordon{Unschedulable: true, Taint: true}), force: true,
			lifted: true, unschedulable: true},
		{name: "fenced again since", node: fencedNode(true, cordoned, core.Cordon{Unschedulable: true, Taint: true}), err: errors.New("again")},
		{name: "no record: not fenced's to lift", node: func() *corev1.Node {
			n := testNode("n1")
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: ReturningTaintKey, Effect: corev1.TaintEffectNoExecute})
			return n
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn, cs, rec := newTainter("fencer-b", tc.node)
			before := tc.node.DeepCopy()
			lift := tn.Lift
			if tc.force {
				lift = tn.ForceLift
			}
			written, err := lift(context.Background(), "n1", "observed")
			switch {
			case tc.err == nil && err != nil, tc.err != nil && err == nil:
				t.Fatalf("Lift: %v, want %v", err, tc.err)
			case tc.err == ErrNotObserved && !errors.Is(err, ErrNotObserved):
				t.Fatalf("Lift: %v, want %v", err, tc.err)
			}
			n := getNode(t, cs, "n1")
			if !tc.lifted {
				if written != nil || count(cs, "update", "nodes") != 0 || len(events(rec)) > 0 {
					t.Fatalf("wrote %+v", n.Spec)
				}
				return
			}
			if written == nil || count(cs, "update", "nodes") != 1 || HasReturningTaint(n) || n.Annotations[AnnotationReturning] != "" {
				t.Fatalf("after Lift: %+v %v", n.Spec, n.Annotations)
			}
			if n.Spec.Unschedulable != tc.unschedulable || CordonOf(n).Taint != CordonOf(before).Taint || len(n.Spec.Taints) != len(before.Spec.Taints)-1 {
				t.Fatalf("cordon %v (want %v), taints %+v: the lift touched more than fenced's own", n.Spec.Unschedulable, tc.unschedulable, n.Spec.Taints)
			}
			if evs := events(rec); len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal "+string(vocab.EventReturningTaintLifted)+" ") {
				t.Fatalf("events %q", evs)
			}
		})
	}
}

// TestReturningRecordFormat: the record is written with its format
// version; one without "v" (written before it existed) is format 1; one in
// a newer format is a *FormatError, and neither Remove, Lift nor ForceLift
// writes anything on a node that carries it — it is a newer fenced's.
func TestReturningRecordFormat(t *testing.T) {
	tn, cs, _ := newTainter("fencer-a", fencedNode(true, nil, core.Cordon{}))
	if _, err := tn.Remove(context.Background(), "n1", "back"); err != nil {
		t.Fatal(err)
	}
	if raw := getNode(t, cs, "n1").Annotations[AnnotationReturning]; !strings.HasPrefix(raw, `{"v":1,`) {
		t.Fatalf("record %s: want format 1 first", raw)
	}

	old := fencedNode(false, &core.Returning{By: "fencer-a", Cordoned: true}, core.Cordon{Unschedulable: true})
	if r, ok, err := ReturningOf(old); !ok || err != nil || !r.Cordoned {
		t.Fatalf("a record without v: %+v %v %v", r, ok, err)
	}

	newer := func(c core.Cordon) *corev1.Node {
		n := fencedNode(false, &core.Returning{}, c)
		n.Annotations[AnnotationReturning] = `{"v":2,"at":"tomorrow","cordoned":"maybe"}`
		return n
	}
	if _, ok, err := ReturningOf(newer(core.Cordon{})); !ok || NewerFormat(err) != 2 || !strings.Contains(err.Error(), AnnotationReturning) {
		t.Fatalf("a newer record: ok %v, err %v", ok, err)
	}
	for name, do := range map[string]func(tn *Tainter) error{
		"Remove":    func(tn *Tainter) error { _, err := tn.Remove(context.Background(), "n1", "back"); return err },
		"Lift":      func(tn *Tainter) error { _, err := tn.Lift(context.Background(), "n1", "observed"); return err },
		"ForceLift": func(tn *Tainter) error { _, err := tn.ForceLift(context.Background(), "n1", "forced"); return err },
	} {
		t.Run(name, func(t *testing.T) {
			tn, cs, rec := newTainter("fencer-a", newer(core.Cordon{Unschedulable: true, Taint: true}))
			if err := do(tn); NewerFormat(err) != 2 {
				t.Fatalf("%s: %v; want the newer format's error", name, err)
			}
			if count(cs, "update", "nodes") != 0 || len(events(rec)) != 0 {
				t.Fatalf("%s wrote on a newer fenced's record", name)
			}
		})
	}
}
