package core

import (
	"slices"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// armed is the defaults' statement: W 10 s, T 30 s, a hardware watchdog,
// for boot-1.
var armed = WatchdogArm{BootID: "boot-1", Timeout: 10 * time.Second, Confirm: 30 * time.Second, Device: "i6300ESB timer"}

// defaultWait is WatchdogWait(armed): 42.81 s.
var defaultWait = WatchdogWait(armed)

// watchdogOnly is a healthy node with no power device and a watchdog level,
// armed for its boot; its kubelet last renewed 5 s before t0.
func watchdogOnly() Observation {
	o := healthy()
	o.BMC = BMCObs{}
	arm := armed
	o.Watchdog = WatchdogObs{Level: 1, Arm: &arm}
	o.Node.KubeletRenew = t0.Add(-5 * time.Second)
	return o
}

// orderSeen makes o show a fence order for boot-1, first seen now.
func orderSeen(o *Observation) {
	o.Watchdog.Order = &FenceOrder{BootID: "boot-1", SeenAt: o.Now, KubeletRenewAtSeen: o.Node.KubeletRenew}
}

// stepsToOrder: the node loses its power at t0+6s (beats, gossip, and its
// agent silent to a challenge then); 12 s later (watchdogOrderAfter) the
// fencer takes the power Lease, writes the order, sees it at 19 s and
// gives the Lease back.
func stepsToOrder() []step {
	never := []ActionKind{ActOrderReset, ActAcquireLease, ActApplyTaint}
	return []step{
		{name: "healthy", phase: PhaseHealthy, notWant: never},
		{name: "power loss", at: 6 * time.Second, change: func(o *Observation) { *o = powerLoss(*o, o.Now) },
			phase: PhaseConfirming, notWant: append(never, ActReadPower), event: vocab.EventNodeSuspected},
		{name: "silent 11.9 s: not yet", at: 17900 * time.Millisecond, phase: PhaseConfirming, notWant: never},
		{name: "silent 12 s: the power Lease", at: 18 * time.Second, phase: PhaseConfirming,
			want: []ActionKind{ActAcquireLease}, notWant: []ActionKind{ActOrderReset, ActApplyTaint}},
		{name: "Lease held: the order", at: 18500 * time.Millisecond, change: func(o *Observation) { o.Cluster.LeaseHeld = true },
			phase: PhaseConfirming, want: []ActionKind{ActOrderReset}, notWant: []ActionKind{ActApplyTaint}, event: vocab.EventFenceOrdered},
		{name: "not seen yet: not written twice", at: 18800 * time.Millisecond, phase: PhaseConfirming, notWant: never},
		// The power action is done: the Lease goes back, for the next
		// node's order (maxConcurrentPowerActions), not the wait.
		{name: "order seen", at: 19 * time.Second, change: orderSeen, phase: PhaseConfirming, notWant: never,
			want: []ActionKind{ActReleaseLease}},
	}
}

// TestWatchdogLevelFencesAPowerLoss: a node with only its watchdog level is
// ordered once its agent and kubelet have been silent for
// watchdogOrderAfter, and tainted with watchdog evidence when the wait
// from the order's sighting has passed — not a moment before.
func TestWatchdogLevelFencesAPowerLoss(t *testing.T) {
	for _, mode := range []vocab.Mode{vocab.ModeConfirmOnly, vocab.ModePowerOff} {
		t.Run(string(mode), func(t *testing.T) {
			steps := append(stepsToOrder(),
				step{name: "waiting", at: 40 * time.Second, phase: PhaseConfirming, notWant: []ActionKind{ActApplyTaint, ActOrderReset}},
				step{name: "a moment before the wait ends", at: 19*time.Second + defaultWait - time.Millisecond, phase: PhaseConfirming,
					notWant: []ActionKind{ActApplyTaint}},
				step{name: "the wait has passed", at: 19*time.Second + defaultWait, phase: PhaseFenced,
					want: []ActionKind{ActApplyTaint, ActReleaseLease}})
			tgt, o := runSteps(t, testPolicy(mode), watchdogOnly(), steps)
			ev := tgt.fence.evidence
			if err := ev.Validate(); err != nil {
				t.Fatalf("evidence %+v: %v", ev, err)
			}
			w := ev.Watchdog
			if ev.Method != vocab.EvidenceWatchdog || ev.BootID != "boot-1" || w == nil || time.Duration(w.Timeout) != 10*time.Second ||
				time.Duration(w.Confirm) != 30*time.Second || !w.OrderSeenAt.Equal(t0.Add(19*time.Second)) || time.Duration(w.Wait) != defaultWait ||
				!w.KubeletLeaseRenewedAt.Equal(o.Node.KubeletRenew) || w.Software || w.Device != "i6300ESB timer" {
				t.Fatalf("evidence = %+v, wait %+v", ev, w)
			}
			if !strings.Contains(ev.Summary(), "hardware watchdog") {
				t.Errorf("summary %q does not name the hardware watchdog", ev.Summary())
			}
		})
	}
}

// TestWatchdogLevelNeedsTheNodesArmedStatement: without the node's signed
// statement for its current boot — none, another boot's, one the fencer
// refused — no order is ever written and nothing is tainted; an Event says
// why, once.
func TestWatchdogLevelNeedsTheNodesArmedStatement(t *testing.T) {
	tests := []struct {
		name string
		arm  func(*WatchdogObs)
		say  string
	}{
		{"none", func(w *WatchdogObs) { w.Arm = nil }, "stated no armed watchdog for boot boot-1"},
		{"an earlier boot's", func(w *WatchdogObs) { w.Arm.BootID = "boot-0" }, "stated no armed watchdog for boot boot-1"},
		{"refused", func(w *WatchdogObs) { w.Arm, w.Refused = nil, "its signature does not check" }, "its signature does not check"},
		{"a software watchdog", func(w *WatchdogObs) { w.Arm.Software, w.Arm.Device = true, "Software Watchdog" },
			"it armed a software watchdog (Software Watchdog), which watchdog.allowSoftware does not accept"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := watchdogOnly()
			tt.arm(&o.Watchdog)
			o = powerLoss(o, t0.Add(6*time.Second))
			o.Node.Ready, o.Node.ReadySince = ReadyUnknown, t0.Add(50*time.Second)
			tgt, said := &Target{Name: "node-a"}, 0
			for at := 6 * time.Second; at < 10*time.Minute; at += 700 * time.Millisecond {
				o.Now = t0.Add(at)
				o.Agent.LastSilent = o.Now
				o.Cluster.LeaseHeld = at > time.Minute
				d := tgt.Step(o, testPolicy(vocab.ModePowerOff))
				if has(d.Actions, ActOrderReset) || has(d.Actions, ActApplyTaint) || has(d.Actions, ActAcquireLease) {
					t.Fatalf("at %s: %v (%s)", at, kinds(d.Actions), d.Reason)
				}
				for _, a := range d.Actions {
					if a.Reason == vocab.EventCannotConfirmPowerState {
						said++
						if !strings.Contains(a.Message, tt.say) {
							t.Errorf("Event %q does not say %q", a.Message, tt.say)
						}
					}
				}
			}
			if said != 1 {
				t.Errorf("said %d times why it cannot fence, want once", said)
			}
		})
	}
}

// TestWatchdogLevelSignsOfLifeVoidTheOrder: a sign of life after the order
// was seen — an answer of its agent, a renewal of its kubelet's Lease, a
// power device reading on — voids that order's evidence for good: no
// taint, not then, not after the wait; the node resets when its agent
// reads the order, and the order is withdrawn once the Node reports
// another boot. An answer after the wait is the safety alarm.
func TestWatchdogLevelSignsOfLifeVoidTheOrder(t *testing.T) {
	tests := []struct {
		name  string
		at    time.Duration
		life  func(*Observation)
		event vocab.EventReason
	}{
		{"its agent answers during the wait", 30 * time.Second, func(o *Observation) { o.Agent = AgentObs{LastProof: o.Now} }, vocab.EventFenceEvidenceVoided},
		{"its kubelet renews during the wait", 30 * time.Second, func(o *Observation) { o.Node.KubeletRenew = o.Now }, vocab.EventFenceEvidenceVoided},
		{"its agent answers after the wait", 19*time.Second + defaultWait + 2*time.Second, func(o *Observation) {
			o.Agent = AgentObs{LastProof: o.Now.Add(-time.Second)}
		}, vocab.EventWatchdogResetContradicted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := stepsToOrder()
			if tt.at > defaultWait {
				// The fencer did not look between the end of the wait and
				// the answer (a queue backed up): the answer meets it first.
				steps = append(steps, step{name: "waiting", at: 40 * time.Second, phase: PhaseConfirming, notWant: []ActionKind{ActApplyTaint}})
			}
			steps = append(steps,
				step{name: "life", at: tt.at, change: tt.life, notWant: []ActionKind{ActApplyTaint, ActOrderReset}, event: tt.event,
					want: []ActionKind{ActReleaseLease}})
			tgt, o := runSteps(t, testPolicy(vocab.ModePowerOff), watchdogOnly(), steps)
			p := testPolicy(vocab.ModePowerOff)
			o.Cluster.LeaseHeld = false
			// Silent again (it hung once more): this order is no evidence
			// any more, however long it waits.
			o.Agent = AgentObs{SilentSince: o.Now, LastSilent: o.Now}
			o.Member.Silent = true
			for at := tt.at; at < 5*time.Minute; at += 900 * time.Millisecond {
				o.Now = t0.Add(at)
				o.Agent.LastSilent = o.Now
				if d := tgt.Step(o, p); has(d.Actions, ActApplyTaint) || has(d.Actions, ActOrderReset) {
					t.Fatalf("at %s after a voided order: %v (%s)", at, kinds(d.Actions), d.Reason)
				}
			}
			// Back in another boot: the order is withdrawn.
			o.Now = t0.Add(5 * time.Minute)
			o.Node.BootID, o.Node.Ready, o.Node.ReadySince = "boot-2", ReadyTrue, o.Now
			o.Member = MemberObs{Known: true, State: vocab.MemberAlive, Since: o.Now, BootID: "boot-2", Signed: true}
			o.Agent = AgentObs{LastProof: o.Now}
			d := tgt.Step(o, p)
			if a := find(d.Actions, ActWithdrawOrder); a == nil || a.BootID != "boot-1" || d.Phase != PhaseHealthy {
				t.Fatalf("back in boot-2: %s %v", d.Phase, kinds(d.Actions))
			}
		})
	}
}

// TestWatchdogLevelOrdersUnderTheGuards: an order is a power action: the
// cluster's guards, the pause, dry run and the exclusion label hold it
// back; a live kubelet or agent does too.
func TestWatchdogLevelOrdersUnderTheGuards(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Observation)
		held   vocab.EventReason
	}{
		{"no quorum", func(o *Observation) { o.Cluster.GossipAlive = 2 }, ""},
		{"storm", func(o *Observation) { o.Cluster.Unhealthy = 3 }, ""},
		{"another power action", func(o *Observation) { o.Cluster.PowerActions = 1 }, ""},
		{"another control-plane node down", func(o *Observation) { o.Node.ControlPlane, o.Cluster.ControlPlaneDown = true, 1 }, ""},
		{"its kubelet renews", func(o *Observation) { o.Node.KubeletRenew = o.Now }, ""},
		{"its agent answers", func(o *Observation) { o.Agent = AgentObs{LastProof: o.Now} }, ""},
		{"paused", func(o *Observation) { o.Cluster.Paused = true }, vocab.EventPausedWouldPowerOff},
		{"excluded", func(o *Observation) { o.Node.Excluded = "fenced.io/exclude" }, vocab.EventExcludedWouldReadPower},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := powerLoss(watchdogOnly(), t0.Add(6*time.Second))
			o.Cluster.LeaseHeld = true
			tgt, p := &Target{Name: "node-a"}, testPolicy(vocab.ModePowerOff)
			var held []vocab.EventReason
			for at := 6 * time.Second; at < 3*time.Minute; at += 500 * time.Millisecond {
				o.Now = t0.Add(at)
				tt.change(&o)
				d := tgt.Step(o, p)
				if has(d.Actions, ActOrderReset) || has(d.Actions, ActApplyTaint) {
					t.Fatalf("at %s: %v (%s)", at, kinds(d.Actions), d.Reason)
				}
				for _, a := range d.Actions {
					if a.Kind == ActHeld {
						held = append(held, a.Reason)
					}
				}
			}
			if tt.held != "" && !slices.Contains(held, tt.held) {
				t.Errorf("held %v, want %s", held, tt.held)
			}
		})
	}
	t.Run("dry run", func(t *testing.T) {
		p := testPolicy(vocab.ModePowerOff)
		p.DryRun = true
		o := powerLoss(watchdogOnly(), t0.Add(6*time.Second))
		o.Cluster.LeaseHeld = true
		tgt := &Target{Name: "node-a"}
		tgt.Step(o, p)
		o.Now = t0.Add(20 * time.Second)
		d := tgt.Step(o, p)
		if has(d.Actions, ActOrderReset) || !slices.Contains(heldReasonsOf(d.Actions), vocab.EventDryRunWouldPowerOff) {
			t.Fatalf("dry run: %v %v", kinds(d.Actions), heldReasonsOf(d.Actions))
		}
	})
}

func heldReasonsOf(as []Action) []vocab.EventReason {
	var r []vocab.EventReason
	for _, a := range as {
		if a.Kind == ActHeld {
			r = append(r, a.Reason)
		}
	}
	return r
}

// TestWatchdogLevelAfterThePowerDevices: with a power device in the
// topology, the watchdog level acts only when it cannot be read; a reading
// decides as ever — off fences at once (even while an order's wait runs),
// on voids the order's evidence.
func TestWatchdogLevelAfterThePowerDevices(t *testing.T) {
	withBMC := func() Observation {
		o := watchdogOnly()
		o.BMC.Configured = true
		return o
	}
	dark := func(o *Observation) {
		o.BMC.InFlight, o.BMC.Failure = false, &Failure{Op: vocab.OpPowerStatus, Kind: vocab.KindTimeout, Message: "no answer", At: o.Now}
	}
	t.Run("reads on: no order", func(t *testing.T) {
		o := powerLoss(withBMC(), t0.Add(6*time.Second))
		o.BMC.Reading = reading(vocab.PowerOn, o.Now, nodeUUID)
		tgt := &Target{Name: "node-a"}
		for at := 6 * time.Second; at < 2*time.Minute; at += time.Second {
			o.Now, o.BMC.Reading.At = t0.Add(at), t0.Add(at)
			if d := tgt.Step(o, testPolicy(vocab.ModeConfirmOnly)); has(d.Actions, ActOrderReset) || has(d.Actions, ActAcquireLease) {
				t.Fatalf("at %s: %v", at, kinds(d.Actions))
			}
		}
	})
	dim := []step{
		{name: "healthy", phase: PhaseHealthy},
		{name: "power loss", at: 6 * time.Second, change: func(o *Observation) { *o = powerLoss(*o, o.Now) },
			phase: PhaseConfirming, want: []ActionKind{ActReadPower}, notWant: []ActionKind{ActAcquireLease, ActOrderReset}},
		{name: "its BMC is dark", at: 11 * time.Second, change: dark, phase: PhaseConfirming, notWant: []ActionKind{ActAcquireLease, ActOrderReset}},
		{name: "silent 12 s: the Lease", at: 18 * time.Second, change: dark, phase: PhaseConfirming, want: []ActionKind{ActAcquireLease}},
		{name: "the order", at: 18500 * time.Millisecond, change: func(o *Observation) { o.Cluster.LeaseHeld = true; dark(o) },
			want: []ActionKind{ActOrderReset}},
		{name: "order seen", at: 19 * time.Second, change: orderSeen, notWant: []ActionKind{ActApplyTaint}},
	}
	t.Run("dark: ordered; then it reads off", func(t *testing.T) {
		steps := append(slices.Clone(dim), step{name: "reads off", at: 25 * time.Second, change: func(o *Observation) {
			o.BMC.Failure, o.BMC.Reading = nil, reading(vocab.PowerOff, o.Now, nodeUUID)
			o.BMC.Reading.KubeletLeaseRenewedAt = o.Node.KubeletRenew
		}, phase: PhaseFenced, want: []ActionKind{ActApplyTaint}})
		tgt, _ := runSteps(t, testPolicy(vocab.ModeConfirmOnly), withBMC(), steps)
		if m := tgt.fence.evidence.Method; m != vocab.EvidenceBMCPowerOff {
			t.Fatalf("fenced with %s", m)
		}
	})
	t.Run("dark: ordered; then it reads on, then dark again", func(t *testing.T) {
		steps := append(slices.Clone(dim), step{name: "reads on", at: 25 * time.Second, change: func(o *Observation) {
			o.BMC.Failure, o.BMC.Reading = nil, reading(vocab.PowerOn, o.Now, nodeUUID)
		}, notWant: []ActionKind{ActApplyTaint}, event: vocab.EventNodeUnresponsiveButPoweredOn})
		tgt, o := runSteps(t, testPolicy(vocab.ModeConfirmOnly), withBMC(), steps)
		var said []vocab.EventReason
		for at := 26 * time.Second; at < 3*time.Minute; at += time.Second {
			o.Now = t0.Add(at)
			dark(&o)
			d := tgt.Step(o, testPolicy(vocab.ModeConfirmOnly))
			if has(d.Actions, ActApplyTaint) {
				t.Fatalf("at %s: tainted on an order the power device contradicted: %v", at, kinds(d.Actions))
			}
			said = append(said, events(d.Actions)...)
		}
		if !slices.Contains(said, vocab.EventFenceEvidenceVoided) {
			t.Errorf("the order's evidence was never said void: %v", said)
		}
	})
}

// TestWatchdogLevelCountsFromItsOwnSighting: an order another fencer wrote
// counts from when this fencer saw it, with the longest armed statement
// seen for the boot (an agent restarted with shorter figures does not
// shorten the wait its earlier run petted by).
func TestWatchdogLevelCountsFromItsOwnSighting(t *testing.T) {
	o := powerLoss(watchdogOnly(), t0.Add(6*time.Second))
	o.Cluster.PowerActions = 1 // the other fencer's Lease: this one writes nothing
	tgt, p := &Target{Name: "node-a"}, testPolicy(vocab.ModePowerOff)
	seen := t0.Add(25 * time.Second)
	for at := 6 * time.Second; ; at += 250 * time.Millisecond {
		o.Now = t0.Add(at)
		if o.Now.Equal(seen) {
			orderSeen(&o)
		}
		if o.Now.After(seen.Add(5 * time.Second)) {
			o.Watchdog.Arm = &WatchdogArm{BootID: "boot-1", Timeout: 5 * time.Second, Confirm: 5 * time.Second}
		}
		d := tgt.Step(o, p)
		if has(d.Actions, ActOrderReset) {
			t.Fatalf("at %s: wrote an order under another fencer's power action", at)
		}
		if has(d.Actions, ActApplyTaint) {
			if o.Now.Before(seen.Add(defaultWait)) {
				t.Fatalf("tainted at %s, %s after the order was seen; want %s", at, o.Now.Sub(seen), defaultWait)
			}
			return
		}
		if at > 2*time.Minute {
			t.Fatalf("never tainted; last: %s", d.Reason)
		}
	}
}

// TestWatchdogEvidenceValidate: watchdog evidence is evidence only with
// its boot, its statement's figures, the order's sighting and a wait of at
// least WatchdogWait that has passed.
func TestWatchdogEvidenceValidate(t *testing.T) {
	good := func() Evidence {
		return Evidence{Method: vocab.EvidenceWatchdog, At: t0.Add(time.Minute), BootID: "boot-1", Watchdog: &WatchdogWaited{
			Timeout: Duration(10 * time.Second), Confirm: Duration(30 * time.Second), OrderSeenAt: t0, Wait: Duration(defaultWait)}}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("good evidence: %v", err)
	}
	tests := []struct {
		name   string
		break_ func(*Evidence)
		say    string
	}{
		{"no boot", func(e *Evidence) { e.BootID = "" }, "without the boot"},
		{"no wait", func(e *Evidence) { e.Watchdog = nil }, "without its wait"},
		{"no timeout", func(e *Evidence) { e.Watchdog.Timeout = 0 }, "both must be set"},
		{"no sighting", func(e *Evidence) { e.Watchdog.OrderSeenAt = time.Time{} }, "without the time"},
		{"too short a wait", func(e *Evidence) { e.Watchdog.Wait = Duration(40 * time.Second) }, "less than"},
		{"taken before the wait ended", func(e *Evidence) { e.At = t0.Add(30 * time.Second) }, "before its wait ended"},
	}
	for _, tt := range tests {
		ev := good()
		tt.break_(&ev)
		if err := ev.Validate(); err == nil || !strings.Contains(err.Error(), tt.say) {
			t.Errorf("%s: Validate = %v, want an error saying %q", tt.name, err, tt.say)
		}
	}
}

// TestWatchdogLevelSoftwareWhenAllowed: a software watchdog's statement
// counts when the policy allows it, and its evidence says so.
func TestWatchdogLevelSoftwareWhenAllowed(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	p.WatchdogAllowSoftware = true
	start := watchdogOnly()
	start.Watchdog.Arm.Software, start.Watchdog.Arm.Device = true, "Software Watchdog"
	steps := append(stepsToOrder(), step{name: "the wait has passed", at: 19*time.Second + defaultWait, phase: PhaseFenced,
		want: []ActionKind{ActApplyTaint}})
	tgt, _ := runSteps(t, p, start, steps)
	if ev := tgt.fence.evidence; !ev.Watchdog.Software || !strings.Contains(ev.Summary(), "SOFTWARE watchdog") || !strings.Contains(ev.Reason, "SOFTWARE") {
		t.Errorf("evidence %+v: summary %q", ev.Watchdog, ev.Summary())
	}
}

// TestWatchdogLevelNeedsTheOrdersSighting: an order whose sighting has no
// time is no wait that ends: never a taint on it.
func TestWatchdogLevelNeedsTheOrdersSighting(t *testing.T) {
	o := powerLoss(watchdogOnly(), t0.Add(6*time.Second))
	o.Watchdog.Order = &FenceOrder{BootID: "boot-1"}
	tgt := &Target{Name: "node-a"}
	for at := 6 * time.Second; at < 5*time.Minute; at += time.Second {
		o.Now = t0.Add(at)
		if d := tgt.Step(o, testPolicy(vocab.ModeConfirmOnly)); has(d.Actions, ActApplyTaint) {
			t.Fatalf("at %s: tainted on an order seen at no known time", at)
		}
	}
}

// TestWatchdogLevelCountsSilenceOfThisSuspicion: an agent left a challenge
// unanswered an hour ago and was not asked since; at a new suspicion that
// silence counts for nothing: the agent is asked, and the order waits for
// watchdogOrderAfter of silence from then.
func TestWatchdogLevelCountsSilenceOfThisSuspicion(t *testing.T) {
	o := powerLoss(watchdogOnly(), t0.Add(6*time.Second))
	o.Agent = AgentObs{SilentSince: t0.Add(-time.Hour), LastSilent: t0.Add(-time.Hour), SilentUntil: t0.Add(-time.Hour)}
	o.Cluster.LeaseHeld = true
	tgt, p := &Target{Name: "node-a"}, testPolicy(vocab.ModePowerOff)
	var asked time.Time // the first challenge of this suspicion
	for at := 6 * time.Second; at < time.Minute; at += 250 * time.Millisecond {
		o.Now = t0.Add(at)
		d := tgt.Step(o, p)
		if has(d.Actions, ActChallenge) {
			// Unanswered.
			o.Agent.LastSilent, o.Agent.SilentUntil = o.Now, o.Now.Add(500*time.Millisecond)
			if asked.IsZero() {
				asked = o.Now
			}
		}
		if has(d.Actions, ActOrderReset) {
			if asked.IsZero() || o.Now.Sub(asked) < p.WatchdogOrderAfter {
				t.Fatalf("ordered at %s on a silence of an earlier episode (asked at %s)", at, asked)
			}
			return
		}
	}
	t.Fatal("never ordered")
}
