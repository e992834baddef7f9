package core

import (
	"slices"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// TestHeldBy is the rule of the three switches, action by action.
func TestHeldBy(t *testing.T) {
	all := []ActionKind{ActReadPower, ActAcquireLease, ActReleaseLease, ActPowerOff, ActPowerOn, ActApplyTaint,
		ActMarkNotReady, ActForceDeletePods, ActRemoveTaint, ActEvent, ActSafetyAlarm, ActRequeue, ActChallenge}
	held := func(ks ...ActionKind) func(ActionKind) bool {
		return func(k ActionKind) bool { return slices.Contains(ks, k) }
	}
	effects := held(ActAcquireLease, ActPowerOff, ActPowerOn, ActApplyTaint, ActMarkNotReady, ActForceDeletePods, ActRemoveTaint)
	tests := []struct {
		name     string
		dryRun   bool
		paused   bool
		excluded string
		want     Hold
		holds    func(ActionKind) bool
	}{
		{name: "no switch", want: HoldNone, holds: held()},
		{name: "dry-run: every effect", dryRun: true, want: HoldDryRun, holds: effects},
		{name: "paused: every effect", paused: true, want: HoldPaused, holds: effects},
		{name: "paused wins over dry-run", dryRun: true, paused: true, want: HoldPaused, holds: effects},
		{name: "excluded: reads and effects, but not the removal of its own taint", excluded: "fenced.io/exclude", want: HoldExcluded,
			holds: held(ActReadPower, ActAcquireLease, ActPowerOff, ActPowerOn, ActApplyTaint, ActMarkNotReady, ActForceDeletePods)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := healthy()
			o.Cluster.Paused, o.Node.Excluded = tt.paused, tt.excluded
			p := testPolicy(vocab.ModePowerOff)
			p.DryRun = tt.dryRun
			for _, k := range all {
				got := HeldBy(k, o, p)
				switch {
				case tt.holds(k) && got != tt.want:
					t.Errorf("HeldBy(%s) = %q, want %q", k, got, tt.want)
				case !tt.holds(k) && got != HoldNone:
					t.Errorf("HeldBy(%s) = %q, want none", k, got)
				}
				// The Event reason of a held action is the catalogue's,
				// with the value it always had.
				if want := string(got) + "Would" + Would(k); got != HoldNone && string(HeldReason(got, k)) != want {
					t.Errorf("HeldReason(%s, %s) = %q, want %q", got, k, HeldReason(got, k), want)
				}
			}
		})
	}
	// Excluded and paused: removing fenced's own taint waits for the
	// pause, like every other write.
	o := healthy()
	o.Cluster.Paused, o.Node.Excluded = true, "fenced.io/exclude"
	if got := HeldBy(ActRemoveTaint, o, testPolicy(vocab.ModeConfirmOnly)); got != HoldPaused {
		t.Errorf("excluded and paused: HeldBy(RemoveTaint) = %q, want Paused", got)
	}
}

// heldActions returns the ActHeld actions of as.
func heldActions(as []Action) []Action {
	var r []Action
	for _, a := range as {
		if a.Kind == ActHeld {
			r = append(r, a)
		}
	}
	return r
}

// offAt is a power loss whose BMC read off at `at`.
func offAt(at time.Duration) Observation {
	o := powerLoss(healthy(), t0.Add(at))
	o.BMC.Reading = reading(vocab.PowerOff, t0.Add(at), nodeUUID)
	return o
}

// TestDryRunDecidesLikeARealRunAndChangesNothing runs one power loss
// through a real and a dry-run target side by side: the dry-run reaches the
// same decision with the same evidence, says once what it would do, and
// then neither writes, nor retries, nor repeats itself.
func TestDryRunDecidesLikeARealRunAndChangesNothing(t *testing.T) {
	real, dry := &Target{Name: "worker-3"}, &Target{Name: "worker-3"}
	p := testPolicy(vocab.ModeConfirmOnly)
	pd := p
	pd.DryRun = true
	o := powerLoss(healthy(), t0.Add(6*time.Second))
	dr, dd := real.Step(o, p), dry.Step(o, pd)
	if dr.Phase != dd.Phase || !slices.Equal(kinds(dr.Actions), kinds(dd.Actions)) {
		t.Fatalf("suspicion: real %s %v, dry-run %s %v", dr.Phase, kinds(dr.Actions), dd.Phase, kinds(dd.Actions))
	}
	o = offAt(6200 * time.Millisecond)
	dr, dd = real.Step(o, p), dry.Step(o, pd)
	ar := find(dr.Actions, ActApplyTaint)
	if ar == nil || has(dd.Actions, ActApplyTaint) {
		t.Fatalf("BMC reads off: real %v, dry-run %v", kinds(dr.Actions), kinds(dd.Actions))
	}
	h := heldActions(dd.Actions)
	if len(h) != 1 || h[0].Held != ActApplyTaint || h[0].Hold != HoldDryRun || h[0].Reason != "DryRunWouldTaint" {
		t.Fatalf("dry-run reports %+v, want one DryRunWouldTaint", h)
	}
	if h[0].Evidence == nil || h[0].Evidence.Reason != ar.Evidence.Reason || h[0].Evidence.Method != ar.Evidence.Method {
		t.Fatalf("dry-run evidence %+v, real %+v", h[0].Evidence, ar.Evidence)
	}
	if msg := h[0].Message; !strings.HasPrefix(msg, "dry-run: would taint worker-3 out-of-service with bmc-power-off evidence: BMC ") ||
		!strings.Contains(msg, "read power off") {
		t.Fatalf("message %q", msg)
	}
	if dd.Phase != PhaseFenced || dr.Phase != PhaseFenced {
		t.Fatalf("phases: real %s, dry-run %s", dr.Phase, dd.Phase)
	}
	// Ten minutes later, looked at every second: nothing more — no
	// second report, no retried write, no "evidence too old" Event, no
	// fresh read.
	for i := 1; i <= 600; i++ {
		o.Now = t0.Add(6200*time.Millisecond + time.Duration(i)*time.Second)
		d := dry.Step(o, pd)
		if len(d.Actions) > 0 || d.Phase != PhaseFenced || !strings.Contains(d.Reason, "held (DryRun)") {
			t.Fatalf("after %d s: %s %q %v %v", i, d.Phase, d.Reason, kinds(d.Actions), events(d.Actions))
		}
	}
	// The node comes back on a new boot: the would-be evidence is void,
	// and the node is healthy again with nothing to undo.
	o.Node.Ready, o.Node.ReadySince, o.Node.BootID = ReadyTrue, o.Now, "boot-2"
	o.Member.State, o.Member.Since, o.Member.BootID = "alive", o.Now, "boot-2"
	o.Now = o.Now.Add(time.Second)
	if d := dry.Step(o, pd); d.Phase != PhaseHealthy || has(d.Actions, ActRemoveTaint) || len(heldActions(d.Actions)) > 0 {
		t.Fatalf("back: %s %v", d.Phase, kinds(d.Actions))
	}
}

// TestDryRunPowerOffMode: a hung node that a real run would switch off is
// reported once, and the power Lease is never taken.
func TestDryRunPowerOffMode(t *testing.T) {
	p := testPolicy(vocab.ModePowerOff)
	p.DryRun = true
	tgt := suspected(p)
	var reports []Action
	for at := 81 * time.Second; at < 5*time.Minute; at += time.Second {
		o := hung(at)
		d := tgt.Step(o, p)
		for _, k := range []ActionKind{ActAcquireLease, ActPowerOff, ActApplyTaint} {
			if has(d.Actions, k) {
				t.Fatalf("at %s: %s in dry-run", at, k)
			}
		}
		if d.Phase != PhaseConfirming {
			t.Fatalf("at %s: phase %s (%s)", at, d.Phase, d.Reason)
		}
		reports = append(reports, heldActions(d.Actions)...)
	}
	if len(reports) != 1 || reports[0].Reason != "DryRunWouldPowerOff" || !strings.HasPrefix(reports[0].Message, "dry-run: would switch node-a off") {
		t.Fatalf("reports %+v, want one DryRunWouldPowerOff", reports)
	}
}

// TestPauseDuringPowerLossThenResume: a pause holds the taint, reported
// once; reads go on; on resume the taint follows at once (after one fresh
// read when the held reading is too old to use).
func TestPauseDuringPowerLossThenResume(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	tgt := &Target{Name: "node-a"}
	o := powerLoss(healthy(), t0.Add(6*time.Second))
	o.Cluster.Paused, o.Cluster.PauseReason = true, "storage maintenance"
	if d := tgt.Step(o, p); !has(d.Actions, ActReadPower) {
		t.Fatalf("paused: the power is still read: %v", kinds(d.Actions))
	}
	o = offAt(6200 * time.Millisecond)
	o.Cluster.Paused, o.Cluster.PauseReason = true, "storage maintenance"
	d := tgt.Step(o, p)
	h := heldActions(d.Actions)
	if has(d.Actions, ActApplyTaint) || len(h) != 1 || h[0].Reason != "PausedWouldTaint" ||
		!strings.HasPrefix(h[0].Message, "fencing is paused cluster-wide (storage maintenance): would taint node-a") {
		t.Fatalf("paused, BMC off: %v %+v", kinds(d.Actions), h)
	}
	for i := 1; i <= 60; i++ {
		o.Now = o.Now.Add(time.Second)
		if d := tgt.Step(o, p); len(d.Actions) > 0 {
			t.Fatalf("paused, %d s later: %v", i, kinds(d.Actions))
		}
	}
	// Resume: the reading is a minute old — read again, then taint.
	o.Cluster.Paused = false
	o.Now = o.Now.Add(time.Second)
	d = tgt.Step(o, p)
	if !has(d.Actions, ActReadPower) || has(d.Actions, ActApplyTaint) {
		t.Fatalf("resumed with an old reading: %v", kinds(d.Actions))
	}
	o.BMC.Reading = reading(vocab.PowerOff, o.Now.Add(50*time.Millisecond), nodeUUID)
	o.Now = o.Now.Add(100 * time.Millisecond)
	if d = tgt.Step(o, p); !has(d.Actions, ActApplyTaint) {
		t.Fatalf("resumed, fresh reading off: %s %v", d.Phase, kinds(d.Actions))
	}

	// Resumed within MaxEvidenceAge of the reading: the taint at once.
	tgt = &Target{Name: "node-a"}
	o = powerLoss(healthy(), t0.Add(6*time.Second))
	o.Cluster.Paused = true
	tgt.Step(o, p)
	o = offAt(6200 * time.Millisecond)
	o.Cluster.Paused = true
	tgt.Step(o, p)
	o.Cluster.Paused, o.Now = false, o.Now.Add(2*time.Second)
	if d = tgt.Step(o, p); !has(d.Actions, ActApplyTaint) {
		t.Fatalf("resumed with a fresh reading: %v", kinds(d.Actions))
	}
}

// TestPauseDuringFenceDelay gives the power Lease back and switches
// nothing off; resuming takes the Lease again at once.
func TestPauseDuringFenceDelay(t *testing.T) {
	p := testPolicy(vocab.ModePowerOff)
	steps := []step{
		{name: "gossip dead", at: 6 * time.Second, phase: PhaseConfirming},
		{name: "fenceAfter passed: take the lease", at: 81 * time.Second, change: func(o *Observation) { *o = hung(81 * time.Second) },
			phase: PhaseConfirming, want: []ActionKind{ActAcquireLease}},
		{name: "lease held: fence delay", at: 82 * time.Second, change: func(o *Observation) { o.Cluster.LeaseHeld = true },
			phase: PhasePoweringOff, event: vocab.EventPoweringOffUnresponsiveNode},
		{name: "paused during the fence delay", at: 84 * time.Second, change: func(o *Observation) { o.Cluster.Paused = true },
			phase: PhaseConfirming, want: []ActionKind{ActReleaseLease, ActHeld}, notWant: []ActionKind{ActPowerOff}},
		{name: "still paused", at: 95 * time.Second, change: func(o *Observation) {
			o.Cluster.LeaseHeld = false
			o.BMC.Reading.At, o.Agent.LastSilent = o.Now, o.Now
		}, phase: PhaseConfirming, notWant: []ActionKind{ActAcquireLease, ActPowerOff, ActHeld}},
		{name: "resumed", at: 96 * time.Second, change: func(o *Observation) { o.Cluster.Paused = false },
			phase: PhaseConfirming, want: []ActionKind{ActAcquireLease}},
	}
	runSteps(t, p, powerLoss(healthy(), t0.Add(6*time.Second)), steps)
}

// TestExcludedNodeIsNeverReadOrFenced: an excluded node that stops
// answering is suspected and reported once; fenced reads nothing, asks for
// nothing again, and takes it up as soon as the label is gone.
func TestExcludedNodeIsNeverReadOrFenced(t *testing.T) {
	const label = "remediation.medik8s.io/exclude-from-remediation"
	p := testPolicy(vocab.ModePowerOff)
	tgt := &Target{Name: "node-a"}
	o := powerLoss(healthy(), t0.Add(6*time.Second))
	o.Node.Excluded = label
	d := tgt.Step(o, p)
	h := heldActions(d.Actions)
	if d.Phase != PhaseSuspect || has(d.Actions, ActReadPower) || len(h) != 1 || h[0].Reason != "ExcludedWouldReadPower" ||
		!strings.Contains(h[0].Message, label+"=true") || !slices.Contains(events(d.Actions), vocab.EventNodeSuspected) {
		t.Fatalf("excluded, gone: %s %v %+v", d.Phase, kinds(d.Actions), h)
	}
	// Hung and down for minutes, power-off allowed by every guard: still
	// nothing, and no requeue loop.
	for at := 7 * time.Second; at < 5*time.Minute; at += time.Second {
		o2 := hung(at)
		o2.Node.Excluded = label
		if d := tgt.Step(o2, p); len(d.Actions) > 0 || d.Phase != PhaseSuspect {
			t.Fatalf("at %s: %s %v", at, d.Phase, kinds(d.Actions))
		}
	}
	// Its own clean-shutdown word would fence it: held too.
	o.Member.State, o.Member.Announced, o.Now = "left", "shutdown-complete", t0.Add(6*time.Minute)
	if d := tgt.Step(o, p); has(d.Actions, ActApplyTaint) || len(heldActions(d.Actions)) != 1 || heldActions(d.Actions)[0].Reason != "ExcludedWouldTaint" {
		t.Fatalf("clean shutdown, excluded: %v %+v", kinds(d.Actions), heldActions(d.Actions))
	}
	// The label is removed: the power is read at once.
	tgt = &Target{Name: "node-a"}
	o = powerLoss(healthy(), t0.Add(6*time.Second))
	o.Node.Excluded = label
	tgt.Step(o, p)
	o.Node.Excluded, o.Now = "", o.Now.Add(time.Minute)
	if d := tgt.Step(o, p); !has(d.Actions, ActReadPower) {
		t.Fatalf("label removed: %v", kinds(d.Actions))
	}
}

// TestExcludedFencedNode: a node fenced before it was labelled keeps its
// taint untouched — the rest of the fence is not done — but the taint
// still comes off when it is back on a new boot. Paused, it stays.
func TestExcludedFencedNode(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	ev := &Evidence{Method: "bmc-power-off", At: t0, BootID: "boot-1", Reason: "BMC read off"}
	o := powerLoss(healthy(), t0.Add(time.Minute))
	o.Node.TaintedByFenced, o.Node.Evidence, o.Node.Excluded = true, ev, "fenced.io/exclude"
	tgt := &Target{Name: "node-a"}
	d := tgt.Step(o, p)
	if d.Phase != PhaseFenced || has(d.Actions, ActMarkNotReady) || has(d.Actions, ActForceDeletePods) || has(d.Actions, ActRequeue) {
		t.Fatalf("adopted, excluded: %s %v", d.Phase, kinds(d.Actions))
	}
	if n := len(heldActions(d.Actions)); n != 2 {
		t.Fatalf("held reports %+v, want MarkNotReady and DeletePods", heldActions(d.Actions))
	}
	o.Now = o.Now.Add(time.Second)
	if d = tgt.Step(o, p); len(d.Actions) > 0 {
		t.Fatalf("again: %v", kinds(d.Actions))
	}
	back := func(o Observation) Observation {
		o.Now = t0.Add(10 * time.Minute)
		o.Node.Ready, o.Node.ReadySince, o.Node.BootID = ReadyTrue, o.Now.Add(-time.Second), "boot-2"
		o.Member.State, o.Member.Since, o.Member.BootID = "alive", o.Now.Add(-time.Second), "boot-2"
		return o
	}
	paused := back(o)
	paused.Cluster.Paused = true
	if d = tgt.Step(paused, p); has(d.Actions, ActRemoveTaint) || d.Phase != PhaseRecovering ||
		len(heldActions(d.Actions)) != 1 || heldActions(d.Actions)[0].Reason != "PausedWouldRemoveTaint" {
		t.Fatalf("back, excluded and paused: %s %v %+v", d.Phase, kinds(d.Actions), heldActions(d.Actions))
	}
	paused.Now = paused.Now.Add(time.Second)
	if d = tgt.Step(paused, p); len(d.Actions) > 0 {
		t.Fatalf("back, still paused: %v", kinds(d.Actions))
	}
	if d = tgt.Step(back(o), p); !has(d.Actions, ActRemoveTaint) || d.Phase != PhaseReturning {
		t.Fatalf("back, excluded: %s %v", d.Phase, kinds(d.Actions))
	}
	// The lift ends the fence too: the label does not hold it.
	swapped := back(o)
	swapped.Node.TaintedByFenced, swapped.Node.Evidence = false, nil
	swapped.Node.Returning = &Returning{At: swapped.Now, Cordoned: true}
	swapped.Node.Cordon = Cordon{Unschedulable: true, Taint: true}
	if d = tgt.Step(swapped, p); !has(d.Actions, ActLiftReturning) || d.Phase != PhaseHealthy {
		t.Fatalf("returned, excluded: %s %v", d.Phase, kinds(d.Actions))
	}
}
