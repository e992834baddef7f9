package core

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

var t0 = time.Date(2026, 11, 21, 3, 0, 0, 0, time.UTC)

const nodeUUID = "4c4c4544-0042-3510-8052-b4c04f4d4e31"

// testPolicy is the core's defaults (DefaultPolicy) for the read pace,
// the challenges, the storm window and the evidence's age, and fixed
// values for what the tests reason about.
func testPolicy(mode vocab.Mode) Policy {
	p := DefaultPolicy()
	p.Mode, p.FenceAfter, p.MaxUnhealthy, p.MaxConcurrentPowerActions = mode, 30*time.Second, 0.5, 1
	p.FenceDelay, p.ForceDeletePods, p.PowerOnAfterFence, p.DryRun = 5*time.Second, true, false, false
	p.ShutdownWait = 2 * time.Minute
	return p
}

// healthy is a node answering on both channels in a 5-node cluster.
func healthy() Observation {
	return Observation{
		Now: t0,
		Node: NodeObs{Exists: true, Ready: ReadyTrue, ReadySince: t0.Add(-time.Hour),
			BootID: "boot-1", SystemUUID: nodeUUID},
		Member:  MemberObs{Known: true, State: "alive", Since: t0.Add(-time.Hour), BootID: "boot-1", Announced: "running", Signed: true},
		BMC:     BMCObs{Configured: true},
		Cluster: ClusterObs{Nodes: 5, Unhealthy: 0, GossipAlive: 5},
	}
}

// powerLoss turns o into the view right after the node lost power at
// t0+1s: gossip declares it dead 5 s later, the API still says Ready, and
// its agent is silent to the liveness challenge sent as the suspicion
// began (at).
func powerLoss(o Observation, at time.Time) Observation {
	o.Now = at
	o.Member.State, o.Member.Since = "dead", t0.Add(6*time.Second)
	o.Agent = AgentObs{SilentSince: at, LastSilent: at}
	o.Cluster.Unhealthy, o.Cluster.GossipAlive = 1, 4
	return o
}

func reading(power vocab.PowerState, at time.Time, guid string) *Reading {
	return &Reading{Power: power, At: at, SystemGUID: guid, Endpoint: "ipmi://198.18.0.1:623"}
}

func kinds(as []Action) []ActionKind {
	var k []ActionKind
	for _, a := range as {
		k = append(k, a.Kind)
	}
	return k
}

func has(as []Action, k ActionKind) bool { return slices.Contains(kinds(as), k) }

func find(as []Action, k ActionKind) *Action {
	for i := range as {
		if as[i].Kind == k {
			return &as[i]
		}
	}
	return nil
}

func events(as []Action) []vocab.EventReason {
	var r []vocab.EventReason
	for _, a := range as {
		if a.Kind == ActEvent || a.Kind == ActSafetyAlarm {
			r = append(r, a.Reason)
		}
	}
	return r
}

// step is one row of a scenario: how the world changed, and what the core
// must (and must not) do about it.
type step struct {
	name    string
	at      time.Duration // since t0
	change  func(*Observation)
	phase   Phase
	want    []ActionKind
	notWant []ActionKind
	event   vocab.EventReason // an Event reason that must be among the actions
}

func runSteps(t *testing.T, p Policy, start Observation, steps []step) (*Target, Observation) {
	t.Helper()
	tgt := &Target{Name: "node-a"}
	o := start
	for _, s := range steps {
		o.Now = t0.Add(s.at)
		if s.change != nil {
			s.change(&o)
		}
		before := tgt.Phase
		d := tgt.Step(o, p)
		checkTransitions(t, s.name, before, d)
		if s.phase != "" && d.Phase != s.phase {
			t.Fatalf("%s: phase %s, want %s (reason %q, actions %v)", s.name, d.Phase, s.phase, d.Reason, kinds(d.Actions))
		}
		for _, k := range s.want {
			if !has(d.Actions, k) {
				t.Fatalf("%s: actions %v lack %s (reason %q)", s.name, kinds(d.Actions), k, d.Reason)
			}
		}
		for _, k := range s.notWant {
			if has(d.Actions, k) {
				t.Fatalf("%s: actions %v include forbidden %s (reason %q)", s.name, kinds(d.Actions), k, d.Reason)
			}
		}
		if s.event != "" && !slices.Contains(events(d.Actions), s.event) {
			t.Fatalf("%s: events %v lack %s", s.name, events(d.Actions), s.event)
		}
		if d.Reason == "" {
			t.Fatalf("%s: decision without a reason", s.name)
		}
	}
	return tgt, o
}

func TestPowerLossIsFencedWithBMCEvidenceAndRecovers(t *testing.T) {
	steps := []step{
		{name: "healthy", phase: PhaseHealthy, notWant: []ActionKind{ActReadPower, ActApplyTaint}},
		{name: "gossip dead", at: 6 * time.Second, change: func(o *Observation) { *o = powerLoss(*o, o.Now) },
			phase: PhaseConfirming, want: []ActionKind{ActReadPower}, notWant: []ActionKind{ActApplyTaint}, event: vocab.EventNodeSuspected},
		{name: "read in flight", at: 6100 * time.Millisecond, change: func(o *Observation) { o.BMC.InFlight = true },
			phase: PhaseConfirming, notWant: []ActionKind{ActApplyTaint, ActReadPower}},
		{name: "BMC reads off", at: 6200 * time.Millisecond, change: func(o *Observation) {
			o.BMC.InFlight = false
			o.BMC.Reading = reading(vocab.PowerOff, t0.Add(6150*time.Millisecond), nodeUUID)
		}, phase: PhaseFenced, want: []ActionKind{ActApplyTaint}, notWant: []ActionKind{ActMarkNotReady, ActForceDeletePods}},
	}
	tgt, o := runSteps(t, testPolicy(vocab.ModeConfirmOnly), healthy(), steps)
	// The informer has not seen our taint yet: nothing is done twice...
	o.Now = o.Now.Add(100 * time.Millisecond)
	d := tgt.Step(o, testPolicy(vocab.ModeConfirmOnly))
	if d.Phase != PhaseFenced || has(d.Actions, ActApplyTaint) || has(d.Actions, ActReadPower) {
		t.Fatalf("before the informer caught up: %s %v", d.Phase, kinds(d.Actions))
	}
	// ...unless the write was lost: then it is written again, with the
	// same evidence.
	o.Now = o.Now.Add(TaintRetry)
	d = tgt.Step(o, testPolicy(vocab.ModeConfirmOnly))
	if a := find(d.Actions, ActApplyTaint); a == nil || a.Evidence != tgt.fence.evidence {
		t.Fatalf("lost taint write not retried: %v", kinds(d.Actions))
	}

	// The taint is there: the rest of the fence follows, and is redone
	// until the Node shows it done.
	o.Node.TaintedByFenced, o.Node.Evidence = true, tgt.fence.evidence
	o.Now = o.Now.Add(100 * time.Millisecond)
	d = tgt.Step(o, testPolicy(vocab.ModeConfirmOnly))
	if !has(d.Actions, ActMarkNotReady) || !has(d.Actions, ActForceDeletePods) || !slices.Contains(events(d.Actions), vocab.EventNodeFenced) {
		t.Fatalf("taint seen: %v %v", kinds(d.Actions), events(d.Actions))
	}
	o.Now = o.Now.Add(TaintRetry)
	d = tgt.Step(o, testPolicy(vocab.ModeConfirmOnly))
	if !has(d.Actions, ActMarkNotReady) || !has(d.Actions, ActForceDeletePods) || slices.Contains(events(d.Actions), vocab.EventNodeFenced) {
		t.Fatalf("fast path not redone, or NodeFenced twice: %v %v", kinds(d.Actions), events(d.Actions))
	}
	o.Node.Ready, o.Node.PodsForceDeleted = ReadyFalse, true
	o.Now = o.Now.Add(time.Second)
	if d = tgt.Step(o, testPolicy(vocab.ModeConfirmOnly)); has(d.Actions, ActMarkNotReady) || has(d.Actions, ActForceDeletePods) {
		t.Fatalf("fast path redone when done: %v", kinds(d.Actions))
	}
	// The node lifecycle controller turns False into Unknown once the
	// kubelet has been silent for its grace period, and again after every
	// write: Unknown is not ready too, so the fencer leaves it (writing
	// False again would be a write war for as long as the node is off).
	o.Node.Ready = ReadyUnknown
	o.Now = o.Now.Add(time.Minute)
	if d = tgt.Step(o, testPolicy(vocab.ModeConfirmOnly)); has(d.Actions, ActMarkNotReady) {
		t.Fatalf("fights the node lifecycle controller over Unknown: %v", kinds(d.Actions))
	}

	// The recorded evidence says what was seen.
	ev := tgt.fence.evidence
	if ev == nil || ev.Method != vocab.EvidenceBMCPowerOff || ev.BootID != "boot-1" || ev.BMC == nil || ev.BMC.Power != vocab.PowerOff ||
		!strings.Contains(ev.Reason, "read power off") {
		t.Fatalf("evidence = %+v", ev)
	}

	// Back with a new boot: wait for the old attachment, then untaint.
	o.Node.TaintedByFenced, o.Node.Evidence = true, ev
	o.Now = t0.Add(2 * time.Minute)
	o.Node.Ready, o.Node.ReadySince, o.Node.BootID = ReadyTrue, t0.Add(110*time.Second), "boot-2"
	o.Member.State, o.Member.Since, o.Member.BootID = "alive", t0.Add(100*time.Second), "boot-2"
	o.Node.VolumeAttachments = 1
	d = tgt.Step(o, testPolicy(vocab.ModeConfirmOnly))
	if d.Phase != PhaseRecovering || has(d.Actions, ActRemoveTaint) || !slices.Contains(events(d.Actions), vocab.EventWaitingForVolumeAttachments) {
		t.Fatalf("with a VolumeAttachment left: %s %v", d.Phase, kinds(d.Actions))
	}
	o.Node.VolumeAttachments = 0
	o.Now = o.Now.Add(time.Second)
	d = tgt.Step(o, testPolicy(vocab.ModeConfirmOnly))
	if d.Phase != PhaseReturning || !has(d.Actions, ActRemoveTaint) || slices.Contains(events(d.Actions), vocab.EventNodeRecovered) {
		t.Fatalf("after the attachment is gone: %s %v %v", d.Phase, kinds(d.Actions), events(d.Actions))
	}
	// The swap landed (returning_test.go goes on from here).
	o.Node.TaintedByFenced, o.Node.Evidence = false, nil
	o.Node.Returning = &Returning{At: o.Now, Cordoned: true}
	o.Node.Cordon = Cordon{Unschedulable: true}
	o.Now = o.Now.Add(10 * time.Millisecond)
	if d = tgt.Step(o, testPolicy(vocab.ModeConfirmOnly)); d.Phase != PhaseReturning || has(d.Actions, ActLiftReturning) {
		t.Fatalf("before the controller-manager answered: %s %v", d.Phase, kinds(d.Actions))
	}
	o.Node.Cordon.Taint = true
	o.Now = o.Now.Add(10 * time.Millisecond)
	d = tgt.Step(o, testPolicy(vocab.ModeConfirmOnly))
	if d.Phase != PhaseHealthy || !has(d.Actions, ActLiftReturning) || !slices.Contains(events(d.Actions), vocab.EventNodeRecovered) {
		t.Fatalf("once the controller-manager answered: %s %v %v", d.Phase, kinds(d.Actions), events(d.Actions))
	}
}

// TestNeverTaintsWithoutEvidence runs each fault for ten minutes of
// decisions and checks that no step ever returns ApplyTaint or vocab.PowerOff.
func TestNeverTaintsWithoutEvidence(t *testing.T) {
	failure := func(kind vocab.ErrorKind) func(*Observation) {
		return func(o *Observation) {
			o.BMC.Failure = &Failure{Op: vocab.OpPowerStatus, Kind: kind, Message: "simulated", At: o.Now}
		}
	}
	cases := []struct {
		name  string
		setup func(*Observation) // applied after power loss
		each  func(*Observation) // applied at every step
		event vocab.EventReason
	}{
		{"BMC unreachable", nil, failure(vocab.KindUnreachable), vocab.EventCannotConfirmPowerState},
		{"BMC times out", nil, failure(vocab.KindTimeout), vocab.EventCannotConfirmPowerState},
		{"BMC refuses the password", nil, failure(vocab.KindAuth), vocab.EventCannotConfirmPowerState},
		{"BMC answers with an error", nil, failure(vocab.KindBMC), vocab.EventCannotConfirmPowerState},
		{"BMC reads on (gossip dead)", nil, func(o *Observation) { o.BMC.Reading = reading(vocab.PowerOn, o.Now, nodeUUID) }, vocab.EventNodeUnresponsiveButPoweredOn},
		{"BMC reads off but its GUID is another machine's", nil, func(o *Observation) {
			o.BMC.Reading = reading(vocab.PowerOff, o.Now, "11111111-2222-3333-4444-555555555555")
		}, vocab.EventCannotConfirmPowerState},
		{"BMC reading of off taken before the node stopped answering", func(o *Observation) {
			o.BMC.Reading = reading(vocab.PowerOff, t0.Add(-time.Minute), nodeUUID)
		}, func(o *Observation) { o.BMC.InFlight = true }, ""},
		{"no BMC in the inventory", func(o *Observation) { o.BMC.Configured = false }, nil, vocab.EventCannotConfirmPowerState},
		{"API partition only: NotReady, gossip alive, BMC on", func(o *Observation) {
			o.Member.State, o.Member.Since = "alive", t0.Add(-time.Hour)
			o.Node.Ready, o.Node.ReadySince = ReadyUnknown, t0.Add(50*time.Second)
		}, func(o *Observation) { o.BMC.Reading = reading(vocab.PowerOn, o.Now, nodeUUID) }, vocab.EventNodeUnresponsiveButPoweredOn},
		{"clean-shutdown announced for an older boot", func(o *Observation) {
			o.Member.State, o.Member.Announced, o.Member.BootID = "left", "shutdown-complete", "boot-0"
		}, failure(vocab.KindTimeout), vocab.EventCannotConfirmPowerState},
		{"shutdown-complete announced but the member never left", func(o *Observation) {
			o.Member.State, o.Member.Announced = "alive", "shutdown-complete"
			o.Node.Ready = ReadyUnknown
		}, failure(vocab.KindTimeout), vocab.EventCannotConfirmPowerState},
		{"shutting down, left without shutdown-complete (mounts remained), BMC times out", func(o *Observation) {
			o.Member.State, o.Member.Announced = "left", "shutting-down"
			o.Node.Ready, o.Node.ShuttingDown = ReadyFalse, true
		}, failure(vocab.KindTimeout), vocab.EventCannotConfirmPowerState},
		{"shutting down, agent alive, BMC reads on", func(o *Observation) {
			o.Member.State, o.Member.Announced = "alive", "shutting-down"
			o.Node.Ready, o.Node.ShuttingDown = ReadyFalse, true
		}, func(o *Observation) { o.BMC.Reading = reading(vocab.PowerOn, o.Now, nodeUUID) }, vocab.EventNodeShuttingDown},
	}
	for _, mode := range []vocab.Mode{vocab.ModeConfirmOnly, vocab.ModePowerOff} {
		for _, tc := range cases {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				p := testPolicy(mode)
				tgt := &Target{Name: "node-a"}
				o := powerLoss(healthy(), t0.Add(6*time.Second))
				// Without a lease no power action may happen in power-off
				// mode either; the lease is never granted here.
				if tc.setup != nil {
					tc.setup(&o)
				}
				var seen []vocab.EventReason
				reads := 0
				for i := 0; i < 600; i++ {
					o.Now = t0.Add(6*time.Second + time.Duration(i)*time.Second)
					if tc.each != nil {
						tc.each(&o)
					}
					d := tgt.Step(o, p)
					if has(d.Actions, ActApplyTaint) || has(d.Actions, ActPowerOff) {
						t.Fatalf("step %d (%s): %v — reason %q", i, d.Phase, kinds(d.Actions), d.Reason)
					}
					if d.Phase == PhaseFenced {
						t.Fatalf("step %d: Fenced without evidence", i)
					}
					if has(d.Actions, ActReadPower) {
						reads++
					}
					seen = append(seen, events(d.Actions)...)
				}
				if tc.event != "" && !slices.Contains(seen, tc.event) {
					t.Fatalf("events %v lack %s", seen, tc.event)
				}
				// Each event is said once per situation, not every step.
				if n := len(seen); n > 4 {
					t.Fatalf("%d events in 10 minutes: %v", n, seen)
				}
				if tc.name != "no BMC in the inventory" && tc.each != nil && reads > 130 {
					t.Fatalf("%d BMC reads in 10 minutes: backoff or recheck not applied", reads)
				}
			})
		}
	}
}

func TestReadBackoffGrowsToMaximum(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	tgt := &Target{Name: "node-a"}
	o := powerLoss(healthy(), t0.Add(6*time.Second))
	var readTimes []time.Time
	for i := 0; i < 300; i++ {
		o.Now = t0.Add(6*time.Second + time.Duration(i)*time.Second)
		o.BMC.Failure = &Failure{Kind: vocab.KindTimeout, At: o.Now}
		if d := tgt.Step(o, p); has(d.Actions, ActReadPower) {
			readTimes = append(readTimes, o.Now)
		}
	}
	var gaps []time.Duration
	for i := 1; i < len(readTimes); i++ {
		gaps = append(gaps, readTimes[i].Sub(readTimes[i-1]))
	}
	if len(gaps) < 5 || gaps[0] > 2*time.Second || gaps[len(gaps)-1] != p.ReadBackoffMax {
		t.Fatalf("gaps between reads %v: want growing from %s to %s", gaps, p.ReadBackoffMin, p.ReadBackoffMax)
	}
}

func TestCleanShutdownIsEvidence(t *testing.T) {
	o := healthy()
	o.Now = t0.Add(10 * time.Second)
	o.Member.State, o.Member.Since, o.Member.Announced = "left", t0.Add(9*time.Second), "shutdown-complete"
	o.BMC.Configured = false // no BMC read is needed
	tgt := &Target{Name: "node-a"}
	d := tgt.Step(o, testPolicy(vocab.ModeConfirmOnly))
	a := find(d.Actions, ActApplyTaint)
	if d.Phase != PhaseFenced || a == nil || a.Evidence.Method != vocab.EvidenceCleanShutdown || a.Evidence.BootID != "boot-1" {
		t.Fatalf("phase %s, actions %v", d.Phase, kinds(d.Actions))
	}
	if has(d.Actions, ActReadPower) {
		t.Fatal("read the BMC although the node proved its clean shutdown")
	}
}

// TestShuttingDownWaitsForTheAnnouncement: a node in a clean shutdown
// whose agent is still in the ring gets no BMC read and no power action
// (in power-off mode with the Lease granted and FenceAfter long past),
// until its agent leaves; then its announcement decides: shutdown-complete
// is evidence, anything else sends the fencer to the BMC.
func TestShuttingDownWaitsForTheAnnouncement(t *testing.T) {
	starts := []struct {
		name  string
		setup func(*Observation)
	}{
		{"agent announced shutting-down", func(o *Observation) { o.Member.Announced = "shutting-down" }},
		{"kubelet reports the shutdown before the announcement arrives", func(o *Observation) { o.Node.ShuttingDown = true }},
		{"agent announced shutdown-complete, not yet left", func(o *Observation) { o.Member.Announced = "shutdown-complete" }},
	}
	ends := []struct {
		name      string
		announced vocab.Announcement
		wantTaint bool
	}{
		{"leaves after shutdown-complete", "shutdown-complete", true},
		{"leaves while still shutting-down (mounts remained)", "shutting-down", false},
	}
	for _, mode := range []vocab.Mode{vocab.ModeConfirmOnly, vocab.ModePowerOff} {
		for _, st := range starts {
			for _, end := range ends {
				t.Run(string(mode)+"/"+st.name+"/"+end.name, func(t *testing.T) {
					p := testPolicy(mode)
					tgt := &Target{Name: "node-a"}
					o := healthy()
					o.Node.Ready, o.Node.ReadySince = ReadyFalse, t0
					o.Cluster.LeaseHeld = true
					st.setup(&o)
					var seen []vocab.EventReason
					for i := 0; i < 100; i++ { // 100 s: past FenceAfter, within ShutdownWait
						o.Now = t0.Add(time.Duration(i) * time.Second)
						d := tgt.Step(o, p)
						for _, k := range []ActionKind{ActReadPower, ActPowerOff, ActApplyTaint} {
							if has(d.Actions, k) {
								t.Fatalf("step %d (%s): %s while the node shuts down with its agent in the ring", i, d.Phase, k)
							}
						}
						if i == 0 && !has(d.Actions, ActRequeue) {
							t.Fatalf("no requeue for the end of the wait: %v", kinds(d.Actions))
						}
						seen = append(seen, events(d.Actions)...)
					}
					if n := strings.Count(fmt.Sprint(seen), string(vocab.EventNodeShuttingDown)); n != 1 {
						t.Fatalf("%s events: %d in %v, want 1", vocab.EventNodeShuttingDown, n, seen)
					}

					o.Now = t0.Add(101 * time.Second)
					o.Member.State, o.Member.Since, o.Member.Announced = "left", o.Now, end.announced
					d := tgt.Step(o, p)
					a := find(d.Actions, ActApplyTaint)
					if end.wantTaint {
						if a == nil || a.Evidence.Method != vocab.EvidenceCleanShutdown || has(d.Actions, ActReadPower) {
							t.Fatalf("after leaving with shutdown-complete: %s %v", d.Phase, kinds(d.Actions))
						}
						return
					}
					if a != nil || !has(d.Actions, ActReadPower) {
						t.Fatalf("after leaving without shutdown-complete: want a BMC read and no taint, got %s %v", d.Phase, kinds(d.Actions))
					}
				})
			}
		}
	}
}

// TestJoiningNodeIsNotSuspected: a node that registered and has not been
// Ready yet is joining: no suspicion, no BMC read, no Event. Once it was
// Ready, losing Ready is suspicious again.
func TestJoiningNodeIsNotSuspected(t *testing.T) {
	p := testPolicy(vocab.ModePowerOff)
	tgt := &Target{Name: "node-a"}
	o := healthy()
	o.Node.Ready, o.Node.ReadySince, o.Node.NeverReady = ReadyFalse, t0, true
	o.Member = MemberObs{} // its agent joins only after the Node exists
	for i := 0; i < 120; i++ {
		o.Now = t0.Add(time.Duration(i) * time.Second)
		if i == 60 {
			o.Member = MemberObs{Known: true, State: "alive", Since: o.Now, BootID: "boot-1", Announced: "running"}
		}
		if d := tgt.Step(o, p); d.Phase != PhaseHealthy || len(d.Actions) > 0 {
			t.Fatalf("step %d: joining node went %s with %v (%s)", i, d.Phase, kinds(d.Actions), d.Reason)
		}
	}
	// Ready once, then not: a suspect like any other.
	o.Node.NeverReady = false
	o.Node.ReadySince = o.Now
	if d := tgt.Step(o, p); d.Phase == PhaseHealthy || !has(d.Actions, ActReadPower) {
		t.Fatalf("node not Ready after it was: %s %v, want a suspicion and a BMC read", d.Phase, kinds(d.Actions))
	}
}

// TestShutdownWaitIsBounded: a node that says it shuts down but stays in
// the ring longer than ShutdownWait is handled like any silent node.
func TestShutdownWaitIsBounded(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	tgt := &Target{Name: "node-a"}
	o := healthy()
	o.Node.Ready, o.Node.ReadySince, o.Node.ShuttingDown = ReadyFalse, t0, true
	var firstRead time.Time
	for i := 0; i < 300 && firstRead.IsZero(); i++ {
		o.Now = t0.Add(time.Duration(i) * time.Second)
		if d := tgt.Step(o, p); has(d.Actions, ActReadPower) {
			firstRead = o.Now
		}
	}
	if want := t0.Add(p.ShutdownWait); !firstRead.Equal(want) {
		t.Fatalf("first BMC read at %s, want at %s (ShutdownWait after the suspicion)", firstRead.Sub(t0), want.Sub(t0))
	}

	// ShutdownWait 0 turns the wait off.
	p.ShutdownWait = 0
	tgt = &Target{Name: "node-a"}
	o.Now = t0
	if d := tgt.Step(o, p); !has(d.Actions, ActReadPower) {
		t.Fatalf("with ShutdownWait 0: %v, want a BMC read at once", kinds(d.Actions))
	}
}

func TestSameBootIDAfterFenceRaisesSafetyAlarmAndKeepsTaint(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	o := healthy()
	o.Node.TaintedByFenced = true
	o.Node.Evidence = &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "boot-1"}
	o.Node.Ready, o.Node.ReadySince = ReadyTrue, t0.Add(time.Minute) // came back after the fence
	o.Now = t0.Add(2 * time.Minute)
	tgt := &Target{Name: "node-a"}
	alarms := 0
	for i := 0; i < 10; i++ {
		o.Now = o.Now.Add(time.Second)
		d := tgt.Step(o, p)
		if has(d.Actions, ActRemoveTaint) {
			t.Fatal("removed the taint of a node that was never off")
		}
		if d.Phase != PhaseFenced {
			t.Fatalf("phase %s", d.Phase)
		}
		if a := find(d.Actions, ActSafetyAlarm); a != nil {
			alarms++
			if a.Reason != vocab.EventFencedNodeBackWithSameBootID || !strings.Contains(a.Message, "boot-1") {
				t.Fatalf("alarm %+v", a)
			}
		}
	}
	if alarms != 1 {
		t.Fatalf("%d alarms, want exactly 1", alarms)
	}
}

func TestGossipBackWithFencedBootRaisesAlarm(t *testing.T) {
	// The kubelet cannot reach the API, but the node's agent gossips again
	// with the boot ID it had when fenced: it never went off.
	o := healthy()
	o.Node.TaintedByFenced = true
	o.Node.Evidence = &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "boot-1"}
	o.Node.Ready, o.Node.ReadySince = ReadyUnknown, t0.Add(-time.Minute)
	o.Member.State, o.Member.Since = "alive", t0.Add(30*time.Second)
	o.Now = t0.Add(time.Minute)
	d := (&Target{Name: "node-a"}).Step(o, testPolicy(vocab.ModeConfirmOnly))
	if !has(d.Actions, ActSafetyAlarm) || has(d.Actions, ActRemoveTaint) {
		t.Fatalf("actions %v", kinds(d.Actions))
	}
}

func TestStaleReadyDoesNotCountAsBack(t *testing.T) {
	// A fencer restarted right after tainting: the API still shows the
	// kubelet's last Ready=True from before the power loss. That is not the
	// node coming back, so no alarm and no untaint.
	o := healthy()
	o.Node.TaintedByFenced = true
	o.Node.Evidence = &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "boot-1"}
	o.Member.State, o.Member.Since = "dead", t0.Add(-5*time.Second)
	o.Now = t0.Add(10 * time.Second)
	d := (&Target{Name: "node-a"}).Step(o, testPolicy(vocab.ModeConfirmOnly))
	if d.Phase != PhaseFenced || has(d.Actions, ActSafetyAlarm) || has(d.Actions, ActRemoveTaint) || has(d.Actions, ActApplyTaint) {
		t.Fatalf("phase %s actions %v", d.Phase, kinds(d.Actions))
	}
}

func TestBackWithinTheSecondOfTheFenceIsRecognised(t *testing.T) {
	// afterFence: on switched the node on 170 ms after the fence; the API
	// stores the kubelet's Ready transition truncated to the second, which
	// is before the fence's sub-second time. Found on the harness.
	fenceAt := t0.Add(40 * time.Millisecond)
	o := healthy()
	o.Node.TaintedByFenced = true
	o.Node.Evidence = &Evidence{Method: vocab.EvidenceBMCPowerOff, At: fenceAt, BootID: "boot-1"}
	o.Node.Ready, o.Node.ReadySince, o.Node.BootID = ReadyTrue, t0, "boot-2"
	o.Member.BootID, o.Member.Since = "boot-2", t0.Add(300*time.Millisecond)
	o.Now = t0.Add(2 * time.Second)
	d := (&Target{Name: "node-a"}).Step(o, testPolicy(vocab.ModePowerOff))
	if d.Phase != PhaseReturning || !has(d.Actions, ActRemoveTaint) {
		t.Fatalf("phase %s actions %v (reason %q)", d.Phase, kinds(d.Actions), d.Reason)
	}
}

func TestUnknownBootIDKeepsTaint(t *testing.T) {
	o := healthy()
	o.Node.TaintedByFenced = true
	o.Node.Evidence = &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "boot-1"}
	o.Node.BootID, o.Member.BootID = "", ""
	o.Node.ReadySince = t0.Add(time.Minute)
	o.Now = t0.Add(2 * time.Minute)
	d := (&Target{Name: "node-a"}).Step(o, testPolicy(vocab.ModeConfirmOnly))
	if has(d.Actions, ActRemoveTaint) || !slices.Contains(events(d.Actions), vocab.EventCannotVerifyReboot) {
		t.Fatalf("actions %v", kinds(d.Actions))
	}
}

// suspected returns a target that started suspecting the node at t0+6s.
func suspected(p Policy) *Target {
	tgt := &Target{Name: "node-a"}
	tgt.Step(powerLoss(healthy(), t0.Add(6*time.Second)), p)
	return tgt
}

// hung is a node that stopped on both channels at t0+6s and whose BMC
// reads on, in a 5-node cluster, everything else allowing a power action:
// its agent has left every liveness challenge unanswered since t0+7s, the
// latest one just now.
func hung(at time.Duration) Observation {
	o := powerLoss(healthy(), t0.Add(at))
	o.Node.Ready, o.Node.ReadySince = ReadyUnknown, t0.Add(50*time.Second)
	o.BMC.Reading = reading(vocab.PowerOn, t0.Add(at), nodeUUID)
	o.Agent = AgentObs{SilentSince: t0.Add(7 * time.Second), LastSilent: t0.Add(at)}
	return o
}

// stepsToPowerOff: power-off mode, a hung node, from the suspicion to the
// power-off request in flight (at 88 s; sent at 87.5 s).
func stepsToPowerOff() []step {
	return []step{
		{name: "gossip dead", at: 6 * time.Second, phase: PhaseConfirming, want: []ActionKind{ActReadPower}},
		{name: "suspect, on, too early", at: 51 * time.Second, change: func(o *Observation) { *o = hung(51 * time.Second) },
			phase: PhaseConfirming, notWant: []ActionKind{ActAcquireLease, ActPowerOff, ActApplyTaint}, event: vocab.EventNodeUnresponsiveButPoweredOn},
		{name: "fenceAfter passed: take the lease", at: 81 * time.Second, change: func(o *Observation) { o.BMC.Reading.At = o.Now },
			phase: PhaseConfirming, want: []ActionKind{ActAcquireLease}, notWant: []ActionKind{ActPowerOff, ActApplyTaint}},
		{name: "lease held: fence delay starts, one more challenge", at: 82 * time.Second, change: func(o *Observation) { o.Cluster.LeaseHeld = true },
			phase: PhasePoweringOff, want: []ActionKind{ActChallenge}, notWant: []ActionKind{ActPowerOff, ActApplyTaint}, event: vocab.EventPoweringOffUnresponsiveNode},
		{name: "during fence delay", at: 84 * time.Second, phase: PhasePoweringOff, want: []ActionKind{ActRequeue}, notWant: []ActionKind{ActPowerOff}},
		{name: "fence delay over, the last challenge still out", at: 87 * time.Second, change: func(o *Observation) { o.Agent.Challenging = true },
			phase: PhasePoweringOff, notWant: []ActionKind{ActPowerOff, ActApplyTaint}},
		{name: "fence delay over, the last challenge unanswered", at: 87500 * time.Millisecond, change: func(o *Observation) {
			o.Agent.Challenging, o.Agent.LastSilent = false, o.Now
		}, phase: PhasePoweringOff, want: []ActionKind{ActPowerOff}, notWant: []ActionKind{ActApplyTaint}},
		{name: "power-off running", at: 88 * time.Second, change: func(o *Observation) { o.BMC.InFlight = true },
			phase: PhasePoweringOff, notWant: []ActionKind{ActPowerOff, ActApplyTaint}},
	}
}

func TestPowerOffModeSwitchesOffUnderLeaseThenFences(t *testing.T) {
	p := testPolicy(vocab.ModePowerOff)
	steps := append(stepsToPowerOff(), []step{
		{name: "confirmed off", at: 90 * time.Second, change: func(o *Observation) {
			o.BMC.InFlight = false
			o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
			o.BMC.Reading.PoweredOffByFenced = true
		}, phase: PhaseFenced, want: []ActionKind{ActApplyTaint, ActReleaseLease}},
		// Ready is Unknown already (the node lifecycle controller's): not
		// ready, nothing to mark.
		{name: "taint seen", at: 90100 * time.Millisecond, change: func(o *Observation) { o.Node.TaintedByFenced = true },
			phase: PhaseFenced, want: []ActionKind{ActForceDeletePods}, notWant: []ActionKind{ActMarkNotReady}, event: vocab.EventNodeFenced},
	}...)
	tgt, _ := runSteps(t, p, powerLoss(healthy(), t0.Add(6*time.Second)), steps)
	if ev := tgt.fence.evidence; ev == nil || !ev.BMC.PoweredOffByFenced || !strings.Contains(ev.Reason, "switched the node off") {
		t.Fatalf("evidence %+v", ev)
	}
}

func TestNoPowerActionWhenGuardsForbidIt(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Observation)
		reason string
	}{
		{"no quorum", func(o *Observation) { o.Cluster.GossipAlive = 2 }, "no quorum"},
		{"storm", func(o *Observation) { o.Cluster.Unhealthy = 3 }, "storm"},
		{"another power action running", func(o *Observation) { o.Cluster.PowerActions = 1 }, "already running"},
		{"second control-plane node", func(o *Observation) { o.Node.ControlPlane, o.Cluster.ControlPlaneDown = true, 1 }, "control-plane"},
		{"its agent answers challenges", func(o *Observation) { o.Agent = AgentObs{LastProof: o.Now} }, "answers liveness challenges"},
		{"its agent was never challenged", func(o *Observation) { o.Agent = AgentObs{} }, "proof of life"},
		{"agent silent for less than fenceAfter", func(o *Observation) { o.Agent.SilentSince = o.Now.Add(-29 * time.Second) }, "not yet unresponsive"},
		{"its agent never joined the ring", func(o *Observation) { o.Member = MemberObs{} }, "never joined"},
		{"Kubernetes still sees it Ready", func(o *Observation) { o.Node.Ready = ReadyTrue }, "Ready"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy(vocab.ModePowerOff)
			tgt := suspected(p)
			var seen []Action
			for i := 0; i < 120; i++ {
				o := hung(100*time.Second + time.Duration(i)*time.Second)
				o.Cluster.LeaseHeld = i > 5 // even a held lease must not help
				tc.change(&o)
				d := tgt.Step(o, p)
				for _, k := range []ActionKind{ActAcquireLease, ActPowerOff, ActApplyTaint} {
					if has(d.Actions, k) {
						t.Fatalf("step %d: %v (reason %q)", i, kinds(d.Actions), d.Reason)
					}
				}
				seen = append(seen, d.Actions...)
			}
			found := false
			for _, a := range seen {
				if a.Reason == vocab.EventNodeUnresponsiveButPoweredOn && strings.Contains(a.Message, tc.reason) {
					found = true
				}
			}
			if !found && tc.name != "Kubernetes still sees it Ready" {
				t.Fatalf("no event explaining %q: %+v", tc.reason, events(seen))
			}
		})
	}
}

func TestNoPowerOffWithoutLease(t *testing.T) {
	p := testPolicy(vocab.ModePowerOff)
	tgt := suspected(p)
	acquires := 0
	for i := 0; i < 300; i++ {
		o := hung(100*time.Second + time.Duration(i)*time.Second)
		d := tgt.Step(o, p) // LeaseHeld stays false: another fencer holds it
		if has(d.Actions, ActPowerOff) || has(d.Actions, ActApplyTaint) {
			t.Fatalf("step %d: %v", i, kinds(d.Actions))
		}
		if has(d.Actions, ActAcquireLease) {
			acquires++
		}
	}
	if acquires == 0 {
		t.Fatal("never tried to take the lease")
	}
}

func TestPowerOffAbortedWhenNodeAnswersDuringFenceDelay(t *testing.T) {
	p := testPolicy(vocab.ModePowerOff)
	tgt := suspected(p)
	o := hung(100 * time.Second)
	o.Cluster.LeaseHeld = true
	if d := tgt.Step(o, p); d.Phase != PhasePoweringOff {
		t.Fatalf("phase %s", d.Phase)
	}
	o.Now = o.Now.Add(2 * time.Second)
	o.Agent = AgentObs{LastProof: o.Now}
	d := tgt.Step(o, p)
	if has(d.Actions, ActPowerOff) || !has(d.Actions, ActReleaseLease) || !slices.Contains(events(d.Actions), vocab.EventPowerOffAborted) {
		t.Fatalf("actions %v", kinds(d.Actions))
	}
}

func TestPowerOffLostLeaseOrFailureNeverTaints(t *testing.T) {
	p := testPolicy(vocab.ModePowerOff)
	for _, tc := range []struct {
		name   string
		change func(o *Observation)
		event  vocab.EventReason
	}{
		{"lease lost during fence delay", func(o *Observation) { o.Cluster.LeaseHeld = false }, ""},
		{"power-off request fails", func(o *Observation) {
			o.BMC.Failure = &Failure{Op: vocab.OpPowerOff, Kind: vocab.KindTimeout, At: o.Now}
		}, vocab.EventPowerOffFailed},
		{"power-off sent but BMC still reads on", func(o *Observation) {
			o.BMC.Reading = reading(vocab.PowerOn, o.Now, nodeUUID)
			o.BMC.Reading.PoweredOffByFenced = true
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tgt := suspected(p)
			o := hung(100 * time.Second)
			o.Cluster.LeaseHeld = true
			tgt.Step(o, p)
			o.Now = o.Now.Add(p.FenceDelay)
			o.Agent.LastSilent = o.Now
			if d := tgt.Step(o, p); !has(d.Actions, ActPowerOff) {
				t.Fatalf("no power-off after the delay: %v", kinds(d.Actions))
			}
			var seen []vocab.EventReason
			for i := 1; i < 60; i++ {
				o.Now = o.Now.Add(time.Second)
				tc.change(&o)
				d := tgt.Step(o, p)
				if has(d.Actions, ActApplyTaint) {
					t.Fatalf("tainted: %v (reason %q)", kinds(d.Actions), d.Reason)
				}
				seen = append(seen, events(d.Actions)...)
			}
			if tc.event != "" && !slices.Contains(seen, tc.event) {
				t.Fatalf("events %v lack %s", seen, tc.event)
			}
		})
	}
}

func TestAdoptsExistingFenceAndReleasesOnNodeDeletion(t *testing.T) {
	o := powerLoss(healthy(), t0.Add(time.Minute))
	o.Node.TaintedByFenced = true
	o.Node.Evidence = &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "boot-1"}
	tgt := &Target{Name: "node-a"}
	d := tgt.Step(o, testPolicy(vocab.ModeConfirmOnly))
	if d.Phase != PhaseFenced || has(d.Actions, ActApplyTaint) || has(d.Actions, ActReadPower) {
		t.Fatalf("phase %s actions %v", d.Phase, kinds(d.Actions))
	}
	// Someone removed our taint (fenced unfence): start over; the node is
	// still down, so it is suspected and confirmed again from scratch.
	o.Now = o.Now.Add(time.Second)
	o.Node.TaintedByFenced, o.Node.Evidence = false, nil
	if d := tgt.Step(o, testPolicy(vocab.ModeConfirmOnly)); d.Phase != PhaseConfirming || !has(d.Actions, ActReadPower) || has(d.Actions, ActApplyTaint) {
		t.Fatalf("after the taint was removed from outside: %s %v", d.Phase, kinds(d.Actions))
	}
	o.Node = NodeObs{}
	o.Cluster.LeaseHeld = true
	if d := tgt.Step(o, testPolicy(vocab.ModeConfirmOnly)); d.Phase != PhaseHealthy || !has(d.Actions, ActReleaseLease) {
		t.Fatalf("after deletion: %s %v", d.Phase, kinds(d.Actions))
	}
}

func TestPowerOnAfterFenceOnceVolumesReleased(t *testing.T) {
	p := testPolicy(vocab.ModePowerOff)
	p.PowerOnAfterFence = true
	o := powerLoss(healthy(), t0.Add(time.Minute))
	r := reading(vocab.PowerOff, t0, nodeUUID)
	r.PoweredOffByFenced = true
	o.Node.TaintedByFenced = true
	o.Node.Evidence = &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "boot-1", BMC: r}
	o.Node.VolumeAttachments = 1
	tgt := &Target{Name: "node-a"}
	if d := tgt.Step(o, p); has(d.Actions, ActPowerOn) {
		t.Fatal("powered on while a VolumeAttachment remains")
	}
	o.Node.VolumeAttachments = 0
	ons := 0
	for i := 0; i < 5; i++ {
		o.Now = o.Now.Add(time.Second)
		if d := tgt.Step(o, p); has(d.Actions, ActPowerOn) {
			ons++
		}
	}
	if ons != 1 {
		t.Fatalf("%d power-on actions, want 1", ons)
	}
}

func TestSuspicionClearsWhenNodeAnswers(t *testing.T) {
	steps := []step{
		{name: "gossip dead", at: 6 * time.Second, change: func(o *Observation) { *o = powerLoss(*o, o.Now) }, phase: PhaseConfirming},
		{name: "BMC on", at: 7 * time.Second, change: func(o *Observation) { o.BMC.Reading = reading(vocab.PowerOn, o.Now, nodeUUID) }, phase: PhaseConfirming},
		{name: "alive again", at: 9 * time.Second, change: func(o *Observation) { o.Member.State, o.Member.Since = "alive", o.Now },
			phase: PhaseHealthy, event: vocab.EventNodeResponsive, notWant: []ActionKind{ActApplyTaint}},
	}
	runSteps(t, testPolicy(vocab.ModeConfirmOnly), healthy(), steps)
}

// TestRandomWalkKeepsTheInvariant drives the core through random
// sequences of observations and checks, at every step, that a taint is
// only ever applied with evidence that holds in that very observation, and
// a power-off only under the lease, with quorum, in power-off mode.
// FENCED_WALK_SEED picks another seed (60 seeds were run when it was written).
func TestRandomWalkKeepsTheInvariant(t *testing.T) {
	seed := uint64(1)
	if s := os.Getenv("FENCED_WALK_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	rare := rand.New(rand.NewPCG(seed, 3))
	// The way back from a fence (returning.go) draws from streams of its
	// own: the node lifecycle controller and operators on the cordon, and
	// whether the swap and the lift land.
	cordons := rand.New(rand.NewPCG(seed, 4))
	api := rand.New(rand.NewPCG(seed, 5))
	// A newer fenced's fences (a rolling upgrade, newer_test.go) too.
	newer := rand.New(rand.NewPCG(seed, 6))
	// The beats to this fencer stop and start (pkg/heartbeat's Detector),
	// truly or not: a stream of their own too.
	beats := rand.New(rand.NewPCG(seed, 7))
	// And how long ago an unanswered challenge was sent.
	waits := rand.New(rand.NewPCG(seed, 8))
	// The watchdog level: opted in or not, armed or not, orders seen.
	wd := rand.New(rand.NewPCG(seed, 9))
	guids := []string{nodeUUID, "", "11111111-2222-3333-4444-555555555555"}
	states := []vocab.MemberState{vocab.MemberAlive, vocab.MemberSuspect, vocab.MemberDead, vocab.MemberLeft}
	readies := []Ready{ReadyTrue, ReadyFalse, ReadyUnknown}
	taints, powerOffs, levelTaints, swaps, lifts, newerFences, watchdogTaints, orders := 0, 0, 0, 0, 0, 0, 0, 0
	made := map[Transition]bool{}
	for walk := 0; walk < 2000; walk++ {
		mode := []vocab.Mode{vocab.ModeConfirmOnly, vocab.ModePowerOff}[rng.IntN(2)]
		p := testPolicy(mode)
		p.DryRun = rng.IntN(10) == 0
		tgt := &Target{Name: "node-a"}
		o := healthy()
		if walk%4 == 3 {
			// Opted in and armed, with (half of them) or without power
			// devices before the level.
			o.Watchdog = WatchdogObs{Level: 1, Arm: &WatchdogArm{BootID: "boot-1", Timeout: 10 * time.Second, Confirm: 30 * time.Second}}
			o.BMC.Configured = walk%8 == 3
		}
		suspectSince := time.Time{}
		switchedOff := false // the last step sent ActPowerOff
		for i := 0; i < 60; i++ {
			o.Now = o.Now.Add(time.Duration(rng.IntN(5000)) * time.Millisecond)
			switch rng.IntN(15) {
			case 0:
				o.Member.State, o.Member.Since = states[rng.IntN(len(states))], o.Now
			case 1:
				o.Node.Ready, o.Node.ReadySince = readies[rng.IntN(len(readies))], o.Now
				o.Node.ShuttingDown = o.Node.Ready != ReadyTrue && rng.IntN(3) == 0
				o.Node.NeverReady = o.Node.Ready != ReadyTrue && rng.IntN(5) == 0
			case 2:
				if rng.IntN(2) == 0 {
					o.BMC.Reading = reading([]vocab.PowerState{vocab.PowerOn, vocab.PowerOff}[rng.IntN(2)], o.Now.Add(-time.Duration(rng.IntN(20))*time.Second), guids[rng.IntN(len(guids))])
					o.BMC.Reading.PoweredOffByFenced = rng.IntN(4) == 0
					break
				}
				// Fencing topology: the BMC, then two PDU outlets feeding
				// two power supplies; any plug may be on, off or dark.
				plug := func(device, name, guid string) PlugRead {
					at := o.Now.Add(-time.Duration(rng.IntN(20)) * time.Second)
					switch rng.IntN(3) {
					case 0:
						return PlugRead{Device: device, Plug: name, Failure: &Failure{Kind: vocab.KindTimeout, At: at}}
					case 1:
						return PlugRead{Device: device, Plug: name, Reading: reading(vocab.PowerOn, at, guid)}
					}
					return PlugRead{Device: device, Plug: name, Reading: reading(vocab.PowerOff, at, guid)}
				}
				r, f := CombineLevels([]LevelRead{
					{Level: 1, Plugs: []PlugRead{plug("bmc", "", guids[rng.IntN(len(guids))])}},
					{Level: 2, Plugs: []PlugRead{plug("pdu-a", "3", ""), plug("pdu-b", "3", "")}},
				})
				if r != nil {
					o.BMC.Reading = r
				} else {
					f.At = o.Now
					o.BMC.Failure = f
				}
			case 3:
				o.BMC.Failure = &Failure{Kind: vocab.KindTimeout, At: o.Now}
			case 4:
				o.BMC.InFlight = !o.BMC.InFlight
			case 5:
				o.Cluster.LeaseHeld = !o.Cluster.LeaseHeld
			case 6:
				o.Member.Announced = []vocab.Announcement{vocab.AnnounceRunning, vocab.AnnounceShuttingDown, vocab.AnnounceShutdownComplete, vocab.AnnounceRestarting}[rng.IntN(4)]
				o.Member.BootID = []string{"boot-1", "boot-0"}[rng.IntN(2)]
				// A hostile member forges announcements it cannot sign.
				o.Member.Signed = rng.IntN(3) != 0
			case 7:
				o.Cluster.GossipAlive = rng.IntN(6)
			case 8:
				switch rng.IntN(3) {
				case 0:
					o.Agent = AgentObs{LastProof: o.Now}
				case 1:
					// Unanswered, sent up to a second ago: its wait spans
					// what happened meanwhile.
					sent := o.Now.Add(-time.Duration(waits.IntN(1000)) * time.Millisecond)
					o.Agent = AgentObs{SilentSince: sent.Add(-time.Duration(rng.IntN(120)) * time.Second), LastSilent: sent, SilentUntil: o.Now}
				case 2:
					o.Agent.Challenging = !o.Agent.Challenging
				}
			case 9:
				o.Cluster.CleanShutdownFences = rng.IntN(4)
			case 10:
				// A node hung for a minute, everything allowing a power
				// action: the walk must reach power-offs to test them.
				o.Node.Ready, o.Node.ReadySince = ReadyUnknown, o.Now.Add(-time.Minute)
				o.Agent = AgentObs{SilentSince: o.Now.Add(-time.Minute), LastSilent: o.Now, SilentUntil: o.Now}
				o.BMC.Reading, o.BMC.InFlight = reading(vocab.PowerOn, o.Now, nodeUUID), false
				o.Cluster.GossipAlive, o.Cluster.LeaseHeld = 5, true
			case 11:
				// Signs of life after a reading: the kubelet renews its
				// Lease, the agent answers a challenge.
				if rng.IntN(2) == 0 {
					o.Node.KubeletRenew = o.Now
				} else {
					o.Agent.LastProof = o.Now
				}
			case 12:
				// The node came back on a new boot, seen by the API or by
				// its agent's signed word.
				if rng.IntN(2) == 0 {
					o.Node.BootID = "boot-2"
				} else {
					o.Member.State, o.Member.Since, o.Member.BootID, o.Member.Signed = "alive", o.Now, "boot-2", true
				}
			case 13:
				// The API write succeeds after all (the informer shows it).
				if tgt.Phase == PhaseFenced && tgt.fence.evidence != nil {
					o.Node.TaintedByFenced, o.Node.Evidence = true, tgt.fence.evidence
				}
			case 14:
				// An operator pauses or resumes fencing, or labels the
				// node excluded or not.
				if rng.IntN(2) == 0 {
					o.Cluster.Paused = !o.Cluster.Paused
				} else if o.Node.Excluded == "" {
					o.Node.Excluded = "fenced.io/exclude"
				} else {
					o.Node.Excluded = ""
				}
			}
			// Rarer events, from a stream of their own so that the one
			// above walks as it always did until one of them happens.
			switch {
			case rare.IntN(400) == 0 && !o.Node.TaintedByFenced:
				// Another fencer (or this one, before a restart) tainted
				// the node: the taint is adopted.
				o.Node.TaintedByFenced, o.Node.Evidence = true, &Evidence{Method: vocab.EvidenceBMCPowerOff, At: o.Now,
					BootID: o.Node.BootID, BMC: reading(vocab.PowerOff, o.Now, nodeUUID), Reason: "another fencer's"}
			case switchedOff && tgt.Phase == PhasePoweringOff && rare.IntN(2) == 0:
				// fenced's own switch-off is confirmed off.
				o.BMC.Reading, o.BMC.InFlight = reading(vocab.PowerOff, o.Now, nodeUUID), false
				o.BMC.Reading.PoweredOffByFenced = true
			}
			switch {
			case o.Node.NewerEvidenceFormat > 0 && newer.IntN(20) == 0:
				// The newer fenced removes its taint.
				o.Node.TaintedByFenced, o.Node.NewerEvidenceFormat = false, 0
			case newer.IntN(600) == 0 && !o.Node.TaintedByFenced:
				// A newer fenced (a rolling upgrade) tainted the node with
				// evidence this fencer cannot read.
				o.Node.TaintedByFenced, o.Node.Evidence, o.Node.NewerEvidenceFormat = true, nil, 2
				newerFences++
			}
			switch {
			case o.Member.State != vocab.MemberAlive:
				o.Member.Silent, o.Member.Doubt, o.Member.SilentSince = false, false, time.Time{} // the ring's rule: a new state is a new life
			case beats.IntN(8) == 0 && !o.Member.Doubt:
				o.Member.Doubt, o.Member.SilentSince = true, o.Now.Add(-time.Duration(beats.IntN(1000))*time.Millisecond)
			case beats.IntN(8) == 0 && o.Member.Doubt && !o.Member.Silent:
				o.Member.Silent = true
			case beats.IntN(8) == 0:
				o.Member.Silent, o.Member.Doubt, o.Member.SilentSince = false, false, time.Time{}
			}
			if walk%4 == 3 {
				// One walk in four has a watchdog level (the others walk
				// as they did before it existed).
				walkWatchdog(wd, &o)
			}
			walkCordon(cordons, &o)
			switch {
			case o.Node.TaintedByFenced && cordons.IntN(map[bool]int{true: 20, false: 300}[tgt.Phase == PhaseRecovering]) == 0:
				// Someone removed the out-of-service taint by hand (an
				// operator's remedy for a node stuck in Recovering, more
				// than for any other).
				o.Node.TaintedByFenced, o.Node.Evidence, o.Node.NewerEvidenceFormat = false, nil, 0
			case o.Node.TaintedByFenced && o.Node.Cordon.Settled() && cordons.IntN(300) == 0:
				// Another fencer, or `fenced unfence`, swapped it.
				swap(&o)
			case o.Node.Returning != nil && cordons.IntN(200) == 0:
				// Someone lifted the returning taint by hand.
				o.Node.Returning = nil
			}
			before := tgt.Phase
			d := tgt.Step(o, p)
			checkTransitions(t, fmt.Sprintf("walk %d step %d", walk, i), before, d)
			for _, tr := range d.Transitions {
				made[tr] = true
			}
			if (before == PhaseHealthy || before == "") && d.Phase != PhaseHealthy {
				suspectSince = o.Now
			}
			// A newer fenced's fence: nothing but its Warning, and giving
			// back a Lease.
			if o.Node.TaintedByFenced && o.Node.NewerEvidenceFormat > 0 {
				for _, a := range d.Actions {
					if a.Kind != ActEvent && a.Kind != ActReleaseLease {
						t.Fatalf("walk %d step %d: %s on a node fenced by a newer fenced (reason %q)", walk, i, a.Kind, d.Reason)
					}
				}
			}
			// The switches: nothing they hold goes out.
			for _, a := range d.Actions {
				if h := HeldBy(a.Kind, o, p); h != HoldNone {
					t.Fatalf("walk %d step %d: %s went out although held (%s)", walk, i, a.Kind, h)
				}
			}
			if a := find(d.Actions, ActApplyTaint); a != nil {
				taints++
				checkEvidence(t, o, a.Evidence, suspectSince)
				if a.Evidence.BMC != nil && a.Evidence.BMC.Level > 0 {
					levelTaints++
				}
				if a.Evidence.Method == vocab.EvidenceWatchdog {
					watchdogTaints++
				}
				// Never on evidence the node contradicted, or too old.
				if ok, why := EvidenceHolds(a.Evidence, o, p.MaxEvidenceAge); !ok {
					t.Fatalf("walk %d step %d: taint written although %s", walk, i, why)
				}
				if a.Evidence.BMC != nil && (o.Node.KubeletRenew.After(a.Evidence.BMC.At) || o.Agent.LastProof.After(a.Evidence.BMC.At)) {
					t.Fatalf("walk %d step %d: taint on a node seen alive after the reading", walk, i)
				}
				// While the kubelet shows life, power evidence counts only
				// with the agent silent to a challenge of this suspicion,
				// whatever gossip says.
				if ag := o.Agent; a.Evidence.BMC != nil && (o.Node.Ready == ReadyTrue || o.Node.KubeletRenew.After(suspectSince)) &&
					(ag.LastSilent.Before(suspectSince) || ag.LastProof.After(ag.LastSilent)) {
					t.Fatalf("walk %d step %d: power-evidence taint with the kubelet alive (Ready=%s, renew %s, suspect since %s) and agent %+v",
						walk, i, o.Node.Ready, o.Node.KubeletRenew, suspectSince, ag)
				}
			}
			checkReturning(t, fmt.Sprintf("walk %d step %d", walk, i), o, d)
			if has(d.Actions, ActOrderReset) {
				orders++
				checkOrder(t, fmt.Sprintf("walk %d step %d", walk, i), o, p, find(d.Actions, ActOrderReset), suspectSince)
			}
			switchedOff = has(d.Actions, ActPowerOff)
			if switchedOff {
				powerOffs++
			}
			if has(d.Actions, ActPowerOff) && (mode != vocab.ModePowerOff || !o.Cluster.LeaseHeld || 2*o.Cluster.GossipAlive <= o.Cluster.Nodes) {
				t.Fatalf("walk %d step %d: power-off in mode %s, lease %v, alive %d/%d", walk, i, mode, o.Cluster.LeaseHeld, o.Cluster.GossipAlive, o.Cluster.Nodes)
			}
			// Down on both channels, by signals no other node can forge:
			// the kubelet not Ready and the agent silent to challenges,
			// each for fenceAfter; gossip's own state plays no part.
			if a := o.Agent; has(d.Actions, ActPowerOff) && (o.Node.Ready == ReadyTrue || a.SilentSince.IsZero() ||
				o.Now.Sub(a.SilentSince) < p.FenceAfter || o.Now.Sub(o.Node.ReadySince) < p.FenceAfter) {
				t.Fatalf("walk %d step %d: power-off with Ready=%s since %s, agent %+v", walk, i, o.Node.Ready, o.Node.ReadySince, a)
			}
			switch {
			case d.Phase == PhaseFenced && has(d.Actions, ActApplyTaint) && rng.IntN(3) != 0:
				// Model the API: the write lands, or (one in three) fails
				// and is retried later.
				o.Node.TaintedByFenced, o.Node.Evidence = true, tgt.fence.evidence
			case has(d.Actions, ActRemoveTaint) && api.IntN(3) != 0:
				swap(&o)
				swaps++
			case has(d.Actions, ActLiftReturning) && api.IntN(3) != 0:
				lift(&o)
				lifts++
			case d.Phase == PhaseHealthy && !has(d.Actions, ActLiftReturning):
				o.Node.TaintedByFenced, o.Node.Evidence, o.Node.NewerEvidenceFormat = false, nil, 0
			}
		}
	}
	// The table has no transition the walk never makes: each one it allows
	// is one the core needs.
	for from, tos := range allowed {
		for _, to := range tos {
			if tr := (Transition{From: from, To: to}); !made[tr] {
				t.Errorf("the walk never made the transition %s → %s of the table", from, to)
			}
		}
	}
	if taints == 0 || powerOffs == 0 || levelTaints == 0 || swaps == 0 || lifts == 0 || newerFences == 0 || watchdogTaints == 0 || orders == 0 {
		t.Fatalf("the walk reached %d taints (%d on a fencing level, %d on the watchdog level), %d power-offs, %d fence orders, %d swaps, %d lifts and %d newer fenced's fences; it tests nothing",
			taints, levelTaints, watchdogTaints, powerOffs, orders, swaps, lifts, newerFences)
	}
	t.Logf("%d taints applied across the walks (%d on a fencing level, %d on the watchdog level), each with valid evidence; %d power-offs, each on a node down on both channels; %d fence orders, each on a node silent for watchdogOrderAfter; %d swaps, each on a settled cordon, and %d lifts, each after the controller's answer; %d newer fenced's fences left alone; %d transitions of the table made",
		taints, levelTaints, watchdogTaints, powerOffs, orders, swaps, lifts, newerFences, len(made))
}

// walkCordon moves the cordon of a walk: the node lifecycle controller
// answers the cordon (often: it runs beside the fencer), and an operator
// cordons or uncordons the node (rarely).
func walkCordon(rng *rand.Rand, o *Observation) {
	switch rng.IntN(30) {
	case 0:
		o.Node.Cordon.Unschedulable = !o.Node.Cordon.Unschedulable
	case 1, 2, 3, 4, 5, 6, 7, 8, 9, 10:
		o.Node.Cordon.Taint = o.Node.Cordon.Unschedulable
	}
}

// swap is what taint.Tainter.Remove writes, in one update: the
// out-of-service taint off, the returning record on, the probe made.
func swap(o *Observation) {
	unschedulable, mine := Probe(o.Node.Cordon, o.Node.Returning)
	o.Node.Returning = &Returning{At: o.Now, Cordoned: mine, UnschedulableTaint: o.Node.Cordon.Taint}
	o.Node.Cordon.Unschedulable = unschedulable
	o.Node.TaintedByFenced, o.Node.Evidence, o.Node.NewerEvidenceFormat = false, nil, 0
}

// lift is what taint.Tainter.Lift writes: the returning record off, and
// fenced's own cordon.
func lift(o *Observation) {
	if o.Node.Returning.Cordoned {
		o.Node.Cordon.Unschedulable = false
	}
	o.Node.Returning = nil
}

// checkReturning holds a decision to the rules of the way back: the swap
// only on a settled cordon, with a taint or a record of fenced's to work
// on; the lift only once the controller-manager answered; never both.
func checkReturning(t *testing.T, where string, o Observation, d Decision) {
	t.Helper()
	swaps, lifts := has(d.Actions, ActRemoveTaint), has(d.Actions, ActLiftReturning)
	if swaps && (!o.Node.Cordon.Settled() || !o.Node.TaintedByFenced && o.Node.Returning == nil) {
		t.Fatalf("%s: swap with cordon %+v, tainted %v, record %+v", where, o.Node.Cordon, o.Node.TaintedByFenced, o.Node.Returning)
	}
	if lifts && (o.Node.Returning == nil || !o.Node.Returning.Observed(o.Node.Cordon) || o.Node.TaintedByFenced) {
		t.Fatalf("%s: lift with record %+v, cordon %+v, tainted %v", where, o.Node.Returning, o.Node.Cordon, o.Node.TaintedByFenced)
	}
	if swaps && lifts {
		t.Fatalf("%s: swap and lift in one decision", where)
	}
	if swaps && o.Node.NewerEvidenceFormat > 0 {
		t.Fatalf("%s: swap of a newer fenced's fence (evidence format %d)", where, o.Node.NewerEvidenceFormat)
	}
}

// checkTransitions checks a step's phase changes: each is in the table of
// transitions, and together they lead from the phase before the step
// (a new target's empty phase is Healthy) to the decision's.
func checkTransitions(t *testing.T, where string, before Phase, d Decision) {
	t.Helper()
	at := before
	if at == "" {
		at = PhaseHealthy
	}
	for _, tr := range d.Transitions {
		if !tr.Allowed() {
			t.Fatalf("%s: transition %s → %s is not in the table of transitions (reason %q)", where, tr.From, tr.To, d.Reason)
		}
		if tr.From != at || tr.To == tr.From {
			t.Fatalf("%s: transitions %v do not follow on from phase %s", where, d.Transitions, at)
		}
		at = tr.To
	}
	if at != d.Phase {
		t.Fatalf("%s: transitions %v lead to %s, but the decision's phase is %s (reason %q)", where, d.Transitions, at, d.Phase, d.Reason)
	}
}

func checkEvidence(t *testing.T, o Observation, ev *Evidence, suspectSince time.Time) {
	t.Helper()
	switch ev.Method {
	case vocab.EvidenceBMCPowerOff:
		// The evidence's reading is an off reading taken during this
		// suspicion, and no newer reading says on.
		r := ev.BMC
		if r == nil || r.Power != vocab.PowerOff || !r.At.After(suspectSince) {
			t.Fatalf("bmc-power-off taint without a fresh off reading: reading %+v, suspect since %s", r, suspectSince)
		}
		if now := o.BMC.Reading; now == nil || now.At.After(r.At) && now.Power != vocab.PowerOff {
			t.Fatalf("bmc-power-off taint on %+v although the latest reading is %+v", r, now)
		}
		if r.SystemGUID != "" && !SameSystemUUID(r.SystemGUID, o.Node.SystemUUID) {
			t.Fatalf("taint with a BMC GUID %s that is not the node's %s", r.SystemGUID, o.Node.SystemUUID)
		}
		// A level is evidence only when every plug of it read off, during
		// this suspicion, each from the machine the Node names.
		for _, p := range r.Plugs {
			if p.Power != vocab.PowerOff || !p.At.After(suspectSince) {
				t.Fatalf("taint on level %d although %s:%s read %s at %s (suspect since %s)", r.Level, p.Device, p.Plug, p.Power, p.At, suspectSince)
			}
			if p.SystemGUID != "" && !SameSystemUUID(p.SystemGUID, o.Node.SystemUUID) {
				t.Fatalf("taint on level %d with %s's GUID %s, not the node's %s", r.Level, p.Device, p.SystemGUID, o.Node.SystemUUID)
			}
		}

	case vocab.EvidenceCleanShutdown:
		m := o.Member
		if !m.Signed || m.State != "left" || m.Announced != "shutdown-complete" || m.BootID != o.Node.BootID {
			t.Fatalf("clean-shutdown taint with member %+v, node boot %s", m, o.Node.BootID)
		}
		if c := o.Cluster; float64(c.CleanShutdownFences+1) > 0.5*float64(c.Nodes) {
			t.Fatalf("clean-shutdown taint past the storm guard: %d of %d nodes already fenced on their word", c.CleanShutdownFences, c.Nodes)
		}
	case vocab.EvidenceWatchdog:
		// An order for the node's boot, seen by this fencer, its wait
		// passed, no answer and no renewal since; the level opted in.
		ord, w := o.Watchdog.Order, ev.Watchdog
		if err := ev.Validate(); err != nil || o.Watchdog.Level == 0 || ord == nil || ord.BootID != ev.BootID || ev.BootID != o.Node.BootID ||
			!ord.SeenAt.Equal(w.OrderSeenAt) || o.Now.Before(w.ResetBy()) || o.Agent.LastProof.After(ord.SeenAt) ||
			o.Node.KubeletRenew.After(ord.KubeletRenewAtSeen) {
			t.Fatalf("watchdog taint with evidence %+v (%v), watchdog %+v, order %+v, agent %+v, renew %s, node boot %s",
				w, err, o.Watchdog, ord, o.Agent, o.Node.KubeletRenew, o.Node.BootID)
		}
	default:
		t.Fatalf("taint with method %q", ev.Method)
	}
}

// walkWatchdog moves the watchdog level of a walk: opted in or not, the
// node's armed statement (its boot's, an earlier boot's, none), orders
// seen (for its boot, for an earlier one, gone), power devices in the
// topology or not.
func walkWatchdog(rng *rand.Rand, o *Observation) {
	switch rng.IntN(30) {
	case 0:
		// Opted in, with or without power devices before the level; or
		// opted out, the devices back.
		o.Watchdog.Level = 1 - o.Watchdog.Level
		o.BMC.Configured = o.Watchdog.Level == 0 || rng.IntN(2) == 0
	case 1:
		o.Watchdog.Arm = &WatchdogArm{BootID: []string{"boot-1", "boot-1", "boot-0"}[rng.IntN(3)], Timeout: 10 * time.Second, Confirm: 30 * time.Second}
		if rng.IntN(4) == 0 {
			o.Watchdog.Arm = nil
		}
	case 2, 3:
		o.Watchdog.Order = &FenceOrder{BootID: []string{"boot-1", "boot-1", "boot-0", "boot-2"}[rng.IntN(4)],
			SeenAt: o.Now.Add(-time.Duration(rng.IntN(90)) * time.Second), KubeletRenewAtSeen: o.Node.KubeletRenew}
		if rng.IntN(4) == 0 {
			o.Watchdog.Order = nil
		}
	}
}

// checkOrder checks a fence order the core wrote: the level opted in, the
// node's statement for its boot, the power Lease held, the agent silent
// to challenges of this suspicion for watchdogOrderAfter, the cluster's
// guards and switches.
func checkOrder(t *testing.T, where string, o Observation, p Policy, a *Action, suspectSince time.Time) {
	t.Helper()
	d := &decider{o: o, p: p, t: &Target{}}
	arm, ag := o.Watchdog.Arm, o.Agent
	if o.Watchdog.Level == 0 || arm == nil || a.BootID == "" || a.BootID != d.bootID() || !o.Cluster.LeaseHeld ||
		ag.SilentSince.IsZero() || ag.LastProof.After(ag.SilentSince) || ag.LastSilent.Before(suspectSince) ||
		o.Now.Sub(later(ag.SilentSince, suspectSince)) < p.WatchdogOrderAfter ||
		d.clusterBlocked() != "" || HeldBy(ActOrderReset, o, p) != HoldNone {
		t.Fatalf("%s: fence order for boot %q with watchdog %+v, agent %+v, lease %v, cluster %+v (%s)",
			where, a.BootID, o.Watchdog, ag, o.Cluster.LeaseHeld, o.Cluster, d.clusterBlocked())
	}
}

// TestGossipAloneNeverDecides: what any holder of the gossip key can say
// in a node's name — announcements it cannot sign, dead, alive — never
// makes a taint or a power action, and never holds off the BMC read.
func TestGossipAloneNeverDecides(t *testing.T) {
	t.Run("unsigned shutdown-complete and leave: BMC read, no taint", func(t *testing.T) {
		o := healthy()
		o.Now = t0.Add(10 * time.Second)
		o.Member.State, o.Member.Since, o.Member.Announced, o.Member.Signed = "left", t0.Add(9*time.Second), "shutdown-complete", false
		d := (&Target{Name: "node-a"}).Step(o, testPolicy(vocab.ModeConfirmOnly))
		if has(d.Actions, ActApplyTaint) || !has(d.Actions, ActReadPower) {
			t.Fatalf("phase %s actions %v (reason %q)", d.Phase, kinds(d.Actions), d.Reason)
		}
	})
	t.Run("unsigned shutting-down holds off nothing", func(t *testing.T) {
		o := powerLoss(healthy(), t0.Add(6*time.Second))
		o.Member.State, o.Member.Announced, o.Member.Signed = "alive", "shutting-down", false
		o.Node.Ready = ReadyUnknown
		d := (&Target{Name: "node-a"}).Step(o, testPolicy(vocab.ModeConfirmOnly))
		if !has(d.Actions, ActReadPower) || slices.Contains(events(d.Actions), vocab.EventNodeShuttingDown) {
			t.Fatalf("actions %v events %v (reason %q)", kinds(d.Actions), events(d.Actions), d.Reason)
		}
	})
	t.Run("gossip alive does not hold off a power-off of a silent node", func(t *testing.T) {
		p := testPolicy(vocab.ModePowerOff)
		tgt := suspected(p)
		o := hung(100 * time.Second)
		o.Member.State, o.Member.Since = "alive", o.Now // forged: the agent does not answer challenges
		o.Cluster.LeaseHeld = true
		if d := tgt.Step(o, p); d.Phase != PhasePoweringOff {
			t.Fatalf("phase %s (reason %q)", d.Phase, d.Reason)
		}
		o.Now = o.Now.Add(p.FenceDelay)
		o.Agent.LastSilent = o.Now
		if d := tgt.Step(o, p); !has(d.Actions, ActPowerOff) {
			t.Fatalf("actions %v (reason %q)", kinds(d.Actions), d.Reason)
		}
	})
	t.Run("gossip dead does not make a power-off of a node whose agent answers", func(t *testing.T) {
		p := testPolicy(vocab.ModePowerOff)
		tgt := suspected(p)
		for i := 0; i < 120; i++ {
			o := hung(100*time.Second + time.Duration(i)*time.Second)
			o.Cluster.LeaseHeld = true
			o.Agent = AgentObs{LastProof: o.Now.Add(-time.Second)} // it answers: only gossip says dead
			if d := tgt.Step(o, p); has(d.Actions, ActPowerOff) || has(d.Actions, ActApplyTaint) {
				t.Fatalf("step %d: %v (reason %q)", i, kinds(d.Actions), d.Reason)
			}
		}
	})
	t.Run("forged alive with the fenced boot raises no alarm", func(t *testing.T) {
		o := healthy()
		o.Node.TaintedByFenced = true
		o.Node.Evidence = &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "boot-1"}
		o.Node.Ready, o.Node.ReadySince = ReadyUnknown, t0.Add(-time.Minute)
		o.Member.State, o.Member.Since, o.Member.Signed = "alive", t0.Add(30*time.Second), false
		o.Now = t0.Add(time.Minute)
		d := (&Target{Name: "node-a"}).Step(o, testPolicy(vocab.ModeConfirmOnly))
		if has(d.Actions, ActSafetyAlarm) || has(d.Actions, ActRemoveTaint) {
			t.Fatalf("actions %v", kinds(d.Actions))
		}
	})
}

// TestCleanShutdownStormGuard: more than maxUnhealthy of the nodes tainted
// on their own clean-shutdown word within the window stops that evidence,
// raises one alarm, and sends the fencer to the power device instead.
func TestCleanShutdownStormGuard(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	cleanlyDown := func(fencedAlready int) Observation {
		o := healthy()
		o.Now = t0.Add(10 * time.Second)
		o.Member.State, o.Member.Since, o.Member.Announced = "left", t0.Add(9*time.Second), "shutdown-complete"
		o.Cluster.CleanShutdownFences = fencedAlready
		return o
	}
	// 5 nodes, maxUnhealthy 50 %: the second one is still fine...
	if d := (&Target{Name: "node-a"}).Step(cleanlyDown(1), p); !has(d.Actions, ActApplyTaint) {
		t.Fatalf("second clean shutdown not fenced: %v (reason %q)", kinds(d.Actions), d.Reason)
	}
	// ...the third is not.
	tgt := &Target{Name: "node-a"}
	o := cleanlyDown(2)
	d := tgt.Step(o, p)
	// Its kubelet's Ready=True is stale but unproven: the agent is asked
	// together with the read.
	if has(d.Actions, ActApplyTaint) || !has(d.Actions, ActSafetyAlarm) || !has(d.Actions, ActReadPower) ||
		!has(d.Actions, ActChallenge) || !slices.Contains(events(d.Actions), vocab.EventCleanShutdownStorm) {
		t.Fatalf("actions %v events %v (reason %q)", kinds(d.Actions), events(d.Actions), d.Reason)
	}
	o.Now = o.Now.Add(2 * time.Second)
	if d := tgt.Step(o, p); has(d.Actions, ActSafetyAlarm) || has(d.Actions, ActApplyTaint) {
		t.Fatalf("alarm or taint repeated: %v", kinds(d.Actions))
	}
	// The power device still fences it, its agent having stayed silent.
	o.Agent = AgentObs{SilentSince: t0.Add(10 * time.Second), LastSilent: t0.Add(10 * time.Second)}
	o.Now = o.Now.Add(time.Second)
	o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
	d = tgt.Step(o, p)
	if a := find(d.Actions, ActApplyTaint); a == nil || a.Evidence.Method != vocab.EvidenceBMCPowerOff {
		t.Fatalf("actions %v (reason %q)", kinds(d.Actions), d.Reason)
	}
}

// TestEvidenceMustBeTrueWhenTheTaintLands: a power reading that could not
// be written at once (API server down) is re-checked at every retry: any
// sign of life after it voids it, and an old one is read again first.
func TestEvidenceMustBeTrueWhenTheTaintLands(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	// The node lost power at t0+1s; the BMC read off at t0+7s; the API
	// server is down, so the taint does not land.
	pending := func() (*Target, Observation) {
		tgt := suspected(p)
		o := powerLoss(healthy(), t0.Add(7*time.Second))
		o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
		o.BMC.Reading.KubeletLeaseRenewedAt = t0
		o.Node.KubeletRenew = t0
		if d := tgt.Step(o, p); !has(d.Actions, ActApplyTaint) {
			t.Fatalf("no taint on a fresh off reading: %v (reason %q)", kinds(d.Actions), d.Reason)
		}
		return tgt, o
	}
	// alarm: life in the same boot after an off reading means the device
	// or plug is not this node's (a mislabelled outlet): a safety alarm.
	// A new boot is the node switched off and back on: no alarm.
	lives := []struct {
		name   string
		change func(*Observation)
		alarm  bool
	}{
		{"its agent announces a new boot, signed", func(o *Observation) {
			o.Member.State, o.Member.Since, o.Member.BootID, o.Member.Signed = "alive", t0.Add(15*time.Second), "boot-2", true
		}, false},
		{"the API reports a new boot", func(o *Observation) { o.Node.BootID = "boot-2" }, false},
		{"its kubelet renews its Lease", func(o *Observation) { o.Node.KubeletRenew = t0.Add(14 * time.Second) }, true},
		// A renewal stamped before the reading that the fencer's view had
		// not shown when it read (it lags after an API outage): void, but
		// no contradiction of the device.
		{"a renewal stamped before the reading, seen late", func(o *Observation) { o.Node.KubeletRenew = t0.Add(5 * time.Second) }, false},
		{"its agent answers a challenge", func(o *Observation) { o.Agent.LastProof = t0.Add(15 * time.Second) }, true},
	}
	for _, l := range lives {
		t.Run("void: "+l.name, func(t *testing.T) {
			tgt, o := pending()
			o.Now = t0.Add(15 * time.Second)
			l.change(&o)
			d := tgt.Step(o, p)
			said := vocab.EventFenceEvidenceVoided
			if l.alarm {
				said = vocab.EventPowerReadingContradicted
			}
			if has(d.Actions, ActApplyTaint) || !slices.Contains(events(d.Actions), said) {
				t.Fatalf("actions %v events %v (reason %q)", kinds(d.Actions), events(d.Actions), d.Reason)
			}
			alarm := find(d.Actions, ActSafetyAlarm)
			if l.alarm != (alarm != nil && alarm.Reason == vocab.EventPowerReadingContradicted) {
				t.Fatalf("safety alarm %+v; want one: %v", alarm, l.alarm)
			}
			// The contradicted reading is never used again.
			for i := 0; i < 60; i++ {
				o.Now = o.Now.Add(time.Second)
				if d := tgt.Step(o, p); has(d.Actions, ActApplyTaint) {
					t.Fatalf("%s later: tainted on the voided reading (reason %q)", o.Now.Sub(t0), d.Reason)
				}
			}
		})
	}
	t.Run("gossip alive after the reading: ask the agent first", func(t *testing.T) {
		tgt, o := pending()
		o.Now = t0.Add(12 * time.Second)
		o.Member.State, o.Member.Since = "alive", t0.Add(11*time.Second) // forged, or the node is back
		d := tgt.Step(o, p)
		if has(d.Actions, ActApplyTaint) || !has(d.Actions, ActChallenge) {
			t.Fatalf("actions %v (reason %q)", kinds(d.Actions), d.Reason)
		}
		o.Now = t0.Add(13 * time.Second)
		o.Agent = AgentObs{SilentSince: t0.Add(12 * time.Second), LastSilent: t0.Add(12 * time.Second)}
		if d := tgt.Step(o, p); !has(d.Actions, ActApplyTaint) {
			t.Fatalf("agent silent, reading 6 s old: %v (reason %q)", kinds(d.Actions), d.Reason)
		}
	})
	t.Run("a renewal stamped before the reading, seen late: read again at once, then fence", func(t *testing.T) {
		tgt, o := pending()
		o.Now = t0.Add(9 * time.Second)
		o.Node.KubeletRenew = t0.Add(5 * time.Second)
		d := tgt.Step(o, p)
		if has(d.Actions, ActApplyTaint) || has(d.Actions, ActSafetyAlarm) {
			t.Fatalf("actions %v (reason %q)", kinds(d.Actions), d.Reason)
		}
		if !has(d.Actions, ActReadPower) {
			o.Now = o.Now.Add(100 * time.Millisecond)
			if d = tgt.Step(o, p); !has(d.Actions, ActReadPower) {
				t.Fatalf("not read again at once: %v (reason %q)", kinds(d.Actions), d.Reason)
			}
		}
		o.Now = o.Now.Add(100 * time.Millisecond)
		o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
		o.BMC.Reading.KubeletLeaseRenewedAt = t0.Add(5 * time.Second)
		if d = tgt.Step(o, p); !has(d.Actions, ActApplyTaint) {
			t.Fatalf("fresh reading with the renewal as its baseline: %v (reason %q)", kinds(d.Actions), d.Reason)
		}
	})
	t.Run("too old: read again, then fence on the fresh reading", func(t *testing.T) {
		tgt, o := pending()
		o.Now = t0.Add(41 * time.Second) // the API server is back
		d := tgt.Step(o, p)
		if has(d.Actions, ActApplyTaint) || !has(d.Actions, ActReadPower) || !slices.Contains(events(d.Actions), vocab.EventFenceEvidenceVoided) {
			t.Fatalf("34 s old reading: %v %v (reason %q)", kinds(d.Actions), events(d.Actions), d.Reason)
		}
		o.Now = o.Now.Add(100 * time.Millisecond)
		o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
		o.BMC.Reading.KubeletLeaseRenewedAt = t0
		d = tgt.Step(o, p)
		if a := find(d.Actions, ActApplyTaint); a == nil || !a.Evidence.BMC.At.Equal(o.Now) {
			t.Fatalf("fresh reading: %v (reason %q)", kinds(d.Actions), d.Reason)
		}
	})
}

// TestBackOnANewBootWithoutReadyTransition: a node fenced and back within
// the node-monitor grace period never changed its Ready condition, and a
// restarted fencer adopts the fence with no memory of it: a new boot ID
// with Ready is enough to recover.
func TestBackOnANewBootWithoutReadyTransition(t *testing.T) {
	o := healthy()
	o.Now = t0.Add(time.Minute)
	o.Node.TaintedByFenced = true
	o.Node.Evidence = &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0.Add(10 * time.Second), BootID: "boot-1",
		BMC: reading(vocab.PowerOff, t0.Add(10*time.Second), nodeUUID)}
	o.Node.ReadySince = t0.Add(-time.Hour) // never transitioned
	o.Node.BootID = "boot-2"
	o.Member.State = "dead" // even with gossip (forged or stale) saying dead
	d := (&Target{Name: "node-a"}).Step(o, testPolicy(vocab.ModeConfirmOnly))
	if !has(d.Actions, ActRemoveTaint) || d.Phase != PhaseReturning {
		t.Fatalf("phase %s actions %v (reason %q)", d.Phase, kinds(d.Actions), d.Reason)
	}
}

// TestNodeBackAsItIsSwitchedOff is what the soak found (seed
// 1795470187429725287): a hung node resumed just as the fence delay ended
// and fenced switched it off; its kubelet renewed its Lease between the
// power-off request and the off reading. The reading is void all the same
// (the node lived after the baseline), but that is fenced's own switch-off
// at work, not a power device contradicting the node: no safety alarm, a
// new reading at once, the fence on it, and — being fenced's power-off —
// the node is switched on again once its volumes are released
// (afterFence: on). A renewal after the off reading is still a
// contradiction: the plug is not this node's.
func TestNodeBackAsItIsSwitchedOff(t *testing.T) {
	p := testPolicy(vocab.ModePowerOff)
	p.PowerOnAfterFence = true
	offRead := func(renew time.Duration) func(o *Observation) {
		return func(o *Observation) {
			o.BMC.InFlight = false
			o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
			o.BMC.Reading.PoweredOffByFenced = true
			o.BMC.Reading.SentAt = t0.Add(87500 * time.Millisecond)
			o.BMC.Reading.KubeletLeaseRenewedAt = t0.Add(40 * time.Second)
			o.Node.KubeletRenew = t0.Add(renew)
		}
	}
	t.Run("renewed while being switched off", func(t *testing.T) {
		steps := append(stepsToPowerOff(), []step{
			{name: "off, renewed at 89 s between request and reading", at: 90 * time.Second, change: offRead(89 * time.Second),
				phase: PhaseSuspect, notWant: []ActionKind{ActSafetyAlarm, ActApplyTaint}, event: vocab.EventFenceEvidenceVoided},
			{name: "read again at once", at: 90100 * time.Millisecond,
				phase: PhaseConfirming, want: []ActionKind{ActReadPower}, notWant: []ActionKind{ActSafetyAlarm, ActApplyTaint}},
			{name: "off again, nothing since", at: 91 * time.Second, change: func(o *Observation) {
				o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
				o.BMC.Reading.KubeletLeaseRenewedAt = o.Node.KubeletRenew
			}, phase: PhaseFenced, want: []ActionKind{ActApplyTaint}, notWant: []ActionKind{ActSafetyAlarm}},
		}...)
		tgt, o := runSteps(t, p, powerLoss(healthy(), t0.Add(6*time.Second)), steps)
		if ev := tgt.fence.evidence; ev == nil || ev.BMC == nil || !ev.BMC.PoweredOffByFenced || ev.BootID != "boot-1" {
			t.Fatalf("evidence %+v: want the new reading, marked as fenced's own power-off of boot-1", ev)
		}
		o.Now = t0.Add(95 * time.Second)
		o.Node.TaintedByFenced, o.Node.Evidence, o.Node.VolumeAttachments = true, tgt.fence.evidence, 0
		on := false
		for range 3 {
			o.Now = o.Now.Add(time.Second)
			on = on || has(tgt.Step(o, p).Actions, ActPowerOn)
		}
		if !on {
			t.Fatal("not switched on again once the volumes were released (afterFence: on)")
		}
	})
	t.Run("renewed after the off reading", func(t *testing.T) {
		steps := append(stepsToPowerOff(),
			step{name: "off, renewed at 91 s, after the reading at 90 s", at: 92 * time.Second, change: func(o *Observation) {
				offRead(91 * time.Second)(o)
				o.BMC.Reading.At = t0.Add(90 * time.Second)
			}, phase: PhaseSuspect, want: []ActionKind{ActSafetyAlarm}, notWant: []ActionKind{ActApplyTaint}})
		runSteps(t, p, powerLoss(healthy(), t0.Add(6*time.Second)), steps)
	})
}
