package core

import (
	"slices"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

func TestCordonRules(t *testing.T) {
	mine := &Returning{Cordoned: true}
	theirs := &Returning{}
	for _, tc := range []struct {
		name   string
		c      Cordon
		before *Returning
		// settled: Cordon.Settled; unschedulable, fencedCordon: Probe.
		settled, unschedulable, fencedCordon bool
	}{
		{"not cordoned: fenced cordons", Cordon{}, nil, true, true, true},
		{"not cordoned, after an earlier probe", Cordon{}, mine, true, true, true},
		{"fenced's own cordon: fenced uncordons", Cordon{Unschedulable: true, Taint: true}, mine, true, false, false},
		{"someone else's cordon: left alone", Cordon{Unschedulable: true, Taint: true}, nil, true, true, false},
		{"someone else's cordon, after a probe of theirs", Cordon{Unschedulable: true, Taint: true}, theirs, true, true, false},
		{"cordoned, controller not yet answered", Cordon{Unschedulable: true}, nil, false, true, false},
		{"uncordoned, controller not yet answered", Cordon{Taint: true}, nil, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Settled(); got != tc.settled {
				t.Errorf("Settled = %v, want %v", got, tc.settled)
			}
			if !tc.settled {
				return // Probe is asked only of a settled cordon
			}
			u, f := Probe(tc.c, tc.before)
			if u != tc.unschedulable || f != tc.fencedCordon {
				t.Errorf("Probe = %v, %v; want %v, %v", u, f, tc.unschedulable, tc.fencedCordon)
			}
			if u == tc.c.Unschedulable && f {
				t.Errorf("Probe claims a cordon it did not set")
			}
		})
	}
}

// TestReturnObserved walks the cordon after each kind of swap through
// what the node lifecycle controller and an operator may do, and says
// when the controller's answer is there (Observed), when the change it
// must answer was undone (ProbeLost) and when someone else's cordon holds
// the lift back (ForeignCordon).
func TestReturnObserved(t *testing.T) {
	cordoned := Returning{Cordoned: true, UnschedulableTaint: false}   // fenced cordoned
	uncordoned := Returning{Cordoned: false, UnschedulableTaint: true} // fenced lifted its own cordon
	foreign := Returning{Cordoned: false, UnschedulableTaint: true}    // someone else's cordon, left alone
	for _, tc := range []struct {
		name                     string
		r                        Returning
		c                        Cordon
		observed, lost, theirCrd bool
	}{
		{"fenced cordoned, not answered yet", cordoned, Cordon{Unschedulable: true}, false, false, false},
		{"fenced cordoned, answered", cordoned, Cordon{Unschedulable: true, Taint: true}, true, false, false},
		{"fenced cordoned, answered, then uncordoned", cordoned, Cordon{Taint: true}, true, false, false},
		{"fenced cordoned, uncordoned by someone before the answer", cordoned, Cordon{}, false, true, false},
		{"fenced uncordoned, not answered yet", uncordoned, Cordon{Taint: true}, false, false, false},
		{"fenced uncordoned, answered", uncordoned, Cordon{}, true, false, false},
		{"fenced uncordoned, cordoned by someone before the answer", uncordoned, Cordon{Unschedulable: true, Taint: true}, false, false, true},
		{"someone else's cordon stays", foreign, Cordon{Unschedulable: true, Taint: true}, false, false, true},
		{"someone else's cordon lifted, not answered yet", foreign, Cordon{Taint: true}, false, false, false},
		{"someone else's cordon lifted, answered", foreign, Cordon{}, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.Observed(tc.c); got != tc.observed {
				t.Errorf("Observed = %v, want %v", got, tc.observed)
			}
			if got := tc.r.ProbeLost(tc.c); got != tc.lost {
				t.Errorf("ProbeLost = %v, want %v", got, tc.lost)
			}
			if got := tc.r.ForeignCordon(tc.c); got != tc.theirCrd {
				t.Errorf("ForeignCordon = %v, want %v", got, tc.theirCrd)
			}
		})
	}
}

// back is a node fenced at boot-1, back Ready on boot-2 with nothing
// left attached, its out-of-service taint still on, at t0+10m.
func back() Observation {
	o := healthy()
	o.Now = t0.Add(10 * time.Minute)
	o.Node.TaintedByFenced = true
	o.Node.Evidence = &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "boot-1", Reason: "BMC read off"}
	o.Node.Ready, o.Node.ReadySince, o.Node.BootID = ReadyTrue, o.Now.Add(-time.Second), "boot-2"
	o.Member.State, o.Member.Since, o.Member.BootID = "alive", o.Now.Add(-time.Second), "boot-2"
	return o
}

// swapped is back after the swap landed on the cordon c (as
// taint.Tainter.Remove writes it).
func swapped(c Cordon) Observation {
	o := back()
	unschedulable, mine := Probe(c, nil)
	o.Node.TaintedByFenced, o.Node.Evidence = false, nil
	o.Node.Returning = &Returning{At: o.Now, By: "fencer-1", Cordoned: mine, UnschedulableTaint: c.Taint}
	o.Node.Cordon = Cordon{Unschedulable: unschedulable, Taint: c.Taint}
	return o
}

// TestTheWayBack drives the core from a node back on a new boot to the
// lift, one table row per situation: the out-of-service taint comes off
// only on a settled cordon and only in the swap; fenced's returning taint
// comes off only after the node lifecycle controller answered.
func TestTheWayBack(t *testing.T) {
	answered := func(o *Observation) { o.Node.Cordon.Taint = o.Node.Cordon.Unschedulable }
	const m10 = 10 * time.Minute // back() and swapped() are at t0+m10
	// Each row starts with a fencer that has not seen the node yet (a
	// restarted one, or another): it adopts what the Node carries.
	for _, tc := range []struct {
		name  string
		start Observation
		steps []step
	}{
		{name: "the cordon settled: swap, wait, lift", start: back(), steps: []step{
			{name: "back", at: m10, phase: PhaseReturning, want: []ActionKind{ActRemoveTaint, ActRequeue}, notWant: []ActionKind{ActLiftReturning}},
			{name: "swap landed", at: m10 + 10*time.Millisecond, change: func(o *Observation) { now := o.Now; *o = swapped(Cordon{}); o.Now = now },
				phase: PhaseReturning, notWant: []ActionKind{ActLiftReturning, ActRemoveTaint}},
			{name: "answered", at: m10 + 20*time.Millisecond, change: answered,
				phase: PhaseHealthy, want: []ActionKind{ActLiftReturning}, event: vocab.EventNodeRecovered},
		}},
		{name: "the controller has not answered an earlier cordon: no swap", start: back(), steps: []step{
			{name: "cordoned, not answered", at: m10, change: func(o *Observation) { o.Node.Cordon = Cordon{Unschedulable: true} },
				phase: PhaseRecovering, notWant: []ActionKind{ActRemoveTaint}, event: vocab.EventWaitingForControllerManager},
			{name: "uncordoned, not answered", at: m10 + time.Second, change: func(o *Observation) { o.Node.Cordon = Cordon{Taint: true} },
				phase: PhaseRecovering, notWant: []ActionKind{ActRemoveTaint}},
			{name: "answered", at: m10 + 2*time.Second, change: answered, phase: PhaseReturning, want: []ActionKind{ActRemoveTaint}},
		}},
		{name: "the cordon undone before the answer: probe again", start: swapped(Cordon{}), steps: []step{
			{name: "adopted, waiting", at: m10, phase: PhaseReturning, notWant: []ActionKind{ActLiftReturning, ActRemoveTaint}},
			{name: "uncordoned by someone", at: m10 + time.Second, change: func(o *Observation) { o.Node.Cordon.Unschedulable = false },
				phase: PhaseReturning, want: []ActionKind{ActRemoveTaint}, notWant: []ActionKind{ActLiftReturning}},
			{name: "cordoned again, answered", at: m10 + 2*time.Second, change: func(o *Observation) { o.Node.Cordon = Cordon{Unschedulable: true, Taint: true} },
				phase: PhaseHealthy, want: []ActionKind{ActLiftReturning}},
		}},
		{name: "someone else's cordon: the returning taint waits for the uncordon", start: swapped(Cordon{Unschedulable: true, Taint: true}), steps: []step{
			{name: "adopted", at: m10, phase: PhaseReturning, notWant: []ActionKind{ActLiftReturning, ActRemoveTaint}, event: vocab.EventWaitingForControllerManager},
			{name: "still cordoned an hour later", at: m10 + time.Hour, phase: PhaseReturning, notWant: []ActionKind{ActLiftReturning, ActRemoveTaint}},
			{name: "uncordoned, not answered", at: m10 + time.Hour + time.Second, change: func(o *Observation) { o.Node.Cordon.Unschedulable = false },
				phase: PhaseReturning, notWant: []ActionKind{ActLiftReturning, ActRemoveTaint}},
			{name: "answered", at: m10 + time.Hour + 2*time.Second, change: answered, phase: PhaseHealthy, want: []ActionKind{ActLiftReturning}},
		}},
		{name: "a record left from an earlier swap, fenced again since: swapped again", start: back(), steps: []step{
			{name: "fenced's cordon, answered; the fence came back meanwhile", at: m10, change: func(o *Observation) {
				o.Node.Returning = &Returning{At: t0, Cordoned: true}
				o.Node.Cordon = Cordon{Unschedulable: true, Taint: true}
			}, phase: PhaseReturning, want: []ActionKind{ActRemoveTaint}},
		}},
		{name: "the swap did not land: written again", start: back(), steps: []step{
			{name: "back", at: m10, phase: PhaseReturning, want: []ActionKind{ActRemoveTaint}},
			{name: "still tainted", at: m10 + 3*time.Second, phase: PhaseReturning, want: []ActionKind{ActRemoveTaint}},
		}},
		{name: "the returning taint lifted from outside", start: swapped(Cordon{}), steps: []step{
			{name: "adopted", at: m10, phase: PhaseReturning},
			{name: "lifted", at: m10 + time.Second, change: func(o *Observation) { o.Node.Returning = nil }, phase: PhaseHealthy,
				notWant: []ActionKind{ActLiftReturning, ActRemoveTaint}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runSteps(t, testPolicy(vocab.ModeConfirmOnly), tc.start, tc.steps)
		})
	}
}

// TestReturnPatience: a controller-manager that does not answer is
// reported once, after ReturnPatience; the returning taint stays.
func TestReturnPatience(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	o := swapped(Cordon{})
	tgt := &Target{Name: "node-a"}
	d := tgt.Step(o, p)
	if a := find(d.Actions, ActRequeue); d.Phase != PhaseReturning || a == nil || a.After != ReturnPatience || len(events(d.Actions)) > 0 {
		t.Fatalf("right after the swap: %s %v %v", d.Phase, kinds(d.Actions), events(d.Actions))
	}
	o.Now = o.Now.Add(ReturnPatience)
	d = tgt.Step(o, p)
	if ev := find(d.Actions, ActEvent); d.Phase != PhaseReturning || ev == nil || ev.Reason != vocab.EventWaitingForControllerManager || ev.EventType != "Warning" {
		t.Fatalf("after the patience: %s %v %+v", d.Phase, kinds(d.Actions), ev)
	}
	o.Now = o.Now.Add(time.Hour)
	if d = tgt.Step(o, p); len(d.Actions) > 0 || d.Phase != PhaseReturning {
		t.Fatalf("an hour later: %s %v", d.Phase, kinds(d.Actions))
	}
}

// TestLiftHeld: the pause and dry-run hold the lift as every Node write;
// an exclusion label does not (TestExcludedFencedNode).
func TestLiftHeld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		paused bool
		dryRun bool
		reason vocab.EventReason
	}{
		{"paused", true, false, vocab.EventPausedWouldLiftReturning},
		{"dry-run", false, true, vocab.EventDryRunWouldLiftReturning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy(vocab.ModeConfirmOnly)
			p.DryRun = tc.dryRun
			o := swapped(Cordon{})
			o.Node.Cordon.Taint = true // answered
			o.Cluster.Paused = tc.paused
			tgt := &Target{Name: "node-a"}
			d := tgt.Step(o, p)
			held := heldActions(d.Actions)
			if d.Phase != PhaseReturning || has(d.Actions, ActLiftReturning) || len(held) != 1 || held[0].Reason != tc.reason {
				t.Fatalf("%s %v %+v", d.Phase, kinds(d.Actions), held)
			}
			o.Now = o.Now.Add(time.Second)
			if d = tgt.Step(o, p); len(d.Actions) > 0 {
				t.Fatalf("reported again: %v", kinds(d.Actions))
			}
			o.Cluster.Paused, p.DryRun = false, false
			if d = tgt.Step(o, p); d.Phase != PhaseHealthy || !has(d.Actions, ActLiftReturning) ||
				!slices.Contains(events(d.Actions), vocab.EventNodeRecovered) {
				t.Fatalf("released: %s %v", d.Phase, kinds(d.Actions))
			}
		})
	}
}
