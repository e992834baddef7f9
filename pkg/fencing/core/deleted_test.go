package core

import (
	"slices"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// TestFencedNodeDeletedAndRegisteredAgain: a fenced node's Node object
// deleted is reported (a Warning) and its fence handed over to be
// remembered; when a Node of that name registers again the core says so
// once — on a new boot, a Normal Event and a new node judged as any; with
// the fenced boot, the safety alarm — and never carries the taint over. A
// deleted Node that was not fenced, or whose taint had not landed, is no
// fence to report.
func TestFencedNodeDeletedAndRegisteredAgain(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	fence := &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "boot-1"}
	fenced := func() (*Target, Observation) {
		o := powerLoss(healthy(), t0.Add(time.Minute))
		o.Node.TaintedByFenced, o.Node.Evidence = true, fence
		tgt := &Target{Name: "node-a"}
		if d := tgt.Step(o, p); d.Phase != PhaseFenced {
			t.Fatalf("phase %s", d.Phase)
		}
		return tgt, o
	}

	tgt, o := fenced()
	o.Now = o.Now.Add(time.Second)
	o.Node = NodeObs{}
	d := tgt.Step(o, p)
	if d.Phase != PhaseHealthy || !slices.Equal(events(d.Actions), []vocab.EventReason{vocab.EventFencedNodeDeleted}) {
		t.Fatalf("deleted: phase %s, events %v", d.Phase, events(d.Actions))
	}
	if a := find(d.Actions, ActNodeDeleted); a == nil || a.Evidence == nil || *a.Evidence != *fence {
		t.Fatalf("deleted: %+v; want the fence handed over", a)
	}

	for _, tc := range []struct {
		name  string
		boot  string
		event vocab.EventReason
		alarm bool
	}{
		{"a new boot", "boot-2", vocab.EventFencedNodeRegisteredAgain, false},
		{"the fenced boot", "boot-1", vocab.EventFencedNodeBackWithSameBootID, true},
	} {
		t.Run("registered again with "+tc.name, func(t *testing.T) {
			tgt := &Target{Name: "node-a"} // the fencer forgot the target with its Node
			o := healthy()
			o.Now = t0.Add(2 * time.Minute)
			o.Node.BootID, o.Node.FencedWhenDeleted = tc.boot, fence
			d := tgt.Step(o, p)
			if !slices.Equal(events(d.Actions), []vocab.EventReason{tc.event}) || has(d.Actions, ActSafetyAlarm) != tc.alarm {
				t.Fatalf("events %v, actions %v", events(d.Actions), kinds(d.Actions))
			}
			if !has(d.Actions, ActNodeRegistered) || has(d.Actions, ActApplyTaint) || d.Phase != PhaseHealthy {
				t.Fatalf("phase %s, actions %v: want the fence forgotten, no taint", d.Phase, kinds(d.Actions))
			}
		})
	}

	t.Run("not fenced, or the taint not landed: nothing to report", func(t *testing.T) {
		for _, tgt := range []*Target{{Name: "node-a"}, {Name: "node-a", Phase: PhaseFenced, fence: fence0(fence)}} {
			o := healthy()
			o.Node = NodeObs{}
			if d := tgt.Step(o, p); len(events(d.Actions)) != 0 || has(d.Actions, ActNodeDeleted) {
				t.Fatalf("from %s: events %v, actions %v", tgt.Phase, events(d.Actions), kinds(d.Actions))
			}
		}
	})
}

// fence0 is a fence whose taint was sent but never seen on the Node.
func fence0(ev *Evidence) fence { return fence{evidence: ev} }
