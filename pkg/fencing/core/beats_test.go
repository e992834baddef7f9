package core

import (
	"slices"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// beatsStopped is a healthy node whose beats to the fencer stopped at
// t0 (their last one), every other channel still answering.
func beatsStopped() Observation {
	o := healthy()
	o.Now = t0.Add(1200 * time.Millisecond)
	o.Member.Silent, o.Member.SilentSince = true, t0
	return o
}

// TestBeatsAloneReadQuietly: a node whose beats alone stopped is read at
// once — the first sign of a power loss — and says nothing while no other
// channel agrees: a power reading of on ends it (counted, not said) and is
// not repeated for the same silence; a reading of off, its agent silent,
// fences it; another channel agreeing makes it an ordinary suspicion, said
// once; beats that come back end it without a word.
func TestBeatsAloneReadQuietly(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)

	t.Run("read at once, nothing said", func(t *testing.T) {
		tgt := &Target{Name: "node-a"}
		d := tgt.Step(beatsStopped(), p)
		if d.Phase == PhaseHealthy || !has(d.Actions, ActReadPower) || len(events(d.Actions)) != 0 {
			t.Fatalf("phase %s, actions %v, events %v", d.Phase, kinds(d.Actions), events(d.Actions))
		}
	})

	t.Run("power on: a false suspicion, read once for this silence", func(t *testing.T) {
		tgt := &Target{Name: "node-a"}
		o := beatsStopped()
		tgt.Step(o, p)
		o.Now = o.Now.Add(50 * time.Millisecond)
		o.BMC.Reading = reading(vocab.PowerOn, o.Now, nodeUUID)
		o.Now = o.Now.Add(time.Millisecond)
		d := tgt.Step(o, p)
		if d.Phase != PhaseHealthy || !has(d.Actions, ActQuietReadOn) || len(events(d.Actions)) != 0 {
			t.Fatalf("phase %s, actions %v, events %v (reason %q)", d.Phase, kinds(d.Actions), events(d.Actions), d.Reason)
		}
		for i := range 30 { // a minute of the same silence
			o.Now = o.Now.Add(2 * time.Second)
			if d := tgt.Step(o, p); d.Phase != PhaseHealthy || has(d.Actions, ActReadPower) || len(events(d.Actions)) != 0 {
				t.Fatalf("step %d of the same silence: phase %s, actions %v", i, d.Phase, kinds(d.Actions))
			}
		}
		// A new silence is read again.
		o.Member.SilentSince = o.Now.Add(-time.Second)
		if d := tgt.Step(o, p); !has(d.Actions, ActReadPower) {
			t.Fatalf("a new silence: actions %v", kinds(d.Actions))
		}
	})

	t.Run("power off, agent silent: said, and fenced", func(t *testing.T) {
		tgt := &Target{Name: "node-a"}
		o := beatsStopped()
		d := tgt.Step(o, p)
		if c := find(d.Actions, ActChallenge); c == nil || c.Within != p.SilentChallengeTimeout || c.Within <= 0 {
			t.Fatalf("kubelet still Ready: the agent is asked with the read, within %s; actions %+v", p.SilentChallengeTimeout, d.Actions)
		}
		o.Now = o.Now.Add(50 * time.Millisecond)
		o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
		o.Agent = AgentObs{SilentSince: o.Now, LastSilent: o.Now.Add(time.Second)}
		o.Now = o.Now.Add(time.Second + time.Millisecond)
		d = tgt.Step(o, p)
		a := find(d.Actions, ActApplyTaint)
		if a == nil || a.Evidence.Method != vocab.EvidenceBMCPowerOff {
			t.Fatalf("phase %s, actions %v (reason %q)", d.Phase, kinds(d.Actions), d.Reason)
		}
		t.Logf("evidence: %s", a.Evidence.Reason)
		if !slices.Contains(events(d.Actions), vocab.EventNodeSuspected) {
			t.Errorf("a power loss found by its beats is said like any: events %v", events(d.Actions))
		}
	})

	t.Run("another channel agrees: said once", func(t *testing.T) {
		tgt := &Target{Name: "node-a"}
		o := beatsStopped()
		tgt.Step(o, p)
		o.Now = o.Now.Add(3 * time.Second)
		o.Member.State, o.Member.Since, o.Member.Silent = vocab.MemberDead, o.Now, false
		d := tgt.Step(o, p)
		if !slices.Equal(events(d.Actions), []vocab.EventReason{vocab.EventNodeSuspected}) {
			t.Fatalf("events %v", events(d.Actions))
		}
		o.Now = o.Now.Add(time.Second)
		if d := tgt.Step(o, p); slices.Contains(events(d.Actions), vocab.EventNodeSuspected) {
			t.Fatalf("said again: %v", events(d.Actions))
		}
	})

	t.Run("beats again: over without a word", func(t *testing.T) {
		tgt := &Target{Name: "node-a"}
		o := beatsStopped()
		tgt.Step(o, p)
		o.Now = o.Now.Add(300 * time.Millisecond)
		o.Member.Silent, o.Member.SilentSince = false, time.Time{}
		d := tgt.Step(o, p)
		if d.Phase != PhaseHealthy || len(events(d.Actions)) != 0 {
			t.Fatalf("phase %s, events %v", d.Phase, events(d.Actions))
		}
	})
}

// TestOnlySilentAgentsGetTheShortChallenge: the short bound is for an agent
// whose beats stopped; one that gossip alone says is gone — its beats may
// be off, or it may be starved — gets the fencer's full bound.
func TestOnlySilentAgentsGetTheShortChallenge(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	o := healthy()
	o.Now = t0.Add(time.Second)
	o.Member.State, o.Member.Since = vocab.MemberDead, t0
	tgt := &Target{Name: "node-a"}
	d := tgt.Step(o, p)
	if c := find(d.Actions, ActChallenge); c == nil || c.Within != 0 {
		t.Fatalf("gossip dead, beats on: want a challenge with the fencer's bound; actions %+v", d.Actions)
	}
}

// TestLateBeatsAskTheAgentFirst: beats that are late (not yet stopped) make
// the fencer ask the agent — with the short bound, once per silence, no
// suspicion, no read, no Event — so that when they have stopped the
// agent's silence is in: an off reading then taints without a second
// challenge and its wait. An answer ends nothing (the node stays healthy)
// and is not asked again for the same silence.
func TestLateBeatsAskTheAgentFirst(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	late := func() Observation {
		o := healthy()
		o.Now = t0.Add(850 * time.Millisecond)
		o.Member.Doubt, o.Member.SilentSince = true, t0
		return o
	}

	tgt := &Target{Name: "node-a"}
	o := late()
	d := tgt.Step(o, p)
	if c := find(d.Actions, ActChallenge); c == nil || c.Within != p.SilentChallengeTimeout || d.Phase != PhaseHealthy ||
		has(d.Actions, ActReadPower) || len(events(d.Actions)) != 0 {
		t.Fatalf("late beats: phase %s, actions %+v", d.Phase, d.Actions)
	}
	o.Agent.Challenging = true
	o.Now = o.Now.Add(100 * time.Millisecond)
	if d := tgt.Step(o, p); has(d.Actions, ActChallenge) {
		t.Fatalf("asked again while the first challenge waits: %v", kinds(d.Actions))
	}

	// Unanswered; the beats have stopped; the power reads off.
	o.Agent = AgentObs{SilentSince: t0.Add(850 * time.Millisecond), LastSilent: t0.Add(850 * time.Millisecond), SilentUntil: t0.Add(1450 * time.Millisecond)}
	o.Now = t0.Add(1350 * time.Millisecond)
	o.Member.Silent = true
	d = tgt.Step(o, p)
	if has(d.Actions, ActChallenge) || !has(d.Actions, ActReadPower) {
		t.Fatalf("beats stopped, the agent silent already: want a read and no second challenge; actions %v", kinds(d.Actions))
	}
	o.BMC.Reading = reading(vocab.PowerOff, o.Now.Add(50*time.Millisecond), nodeUUID)
	o.Now = o.Now.Add(60 * time.Millisecond)
	// The reading came before the challenge's wait ended: silent through it.
	d = tgt.Step(o, p)
	if a := find(d.Actions, ActApplyTaint); a == nil {
		t.Fatalf("off, the agent silent through the reading since its beats were late: want the taint now; phase %s, actions %v (reason %q)", d.Phase, kinds(d.Actions), d.Reason)
	}

	// A reading after the challenge's wait ended is not covered by it:
	// the agent is asked again first.
	tgt = &Target{Name: "node-a"}
	o = late()
	tgt.Step(o, p)
	o.Agent = AgentObs{SilentSince: t0.Add(850 * time.Millisecond), LastSilent: t0.Add(850 * time.Millisecond), SilentUntil: t0.Add(1350 * time.Millisecond)}
	o.Member.Silent, o.Now = true, t0.Add(1400*time.Millisecond)
	tgt.Step(o, p)
	o.BMC.Reading = reading(vocab.PowerOff, t0.Add(1900*time.Millisecond), nodeUUID)
	o.Now = t0.Add(1910 * time.Millisecond)
	if d := tgt.Step(o, p); has(d.Actions, ActApplyTaint) || !has(d.Actions, ActChallenge) {
		t.Fatalf("a reading after the challenge's silence: want a new challenge, no taint; actions %v", kinds(d.Actions))
	}

	// Answered: healthy, and the same silence is not asked about again.
	tgt = &Target{Name: "node-a"}
	o = late()
	tgt.Step(o, p)
	o.Agent = AgentObs{LastProof: o.Now.Add(5 * time.Millisecond)}
	o.Now = o.Now.Add(10 * time.Millisecond)
	if d := tgt.Step(o, p); d.Phase != PhaseHealthy || has(d.Actions, ActChallenge) || len(events(d.Actions)) != 0 {
		t.Fatalf("answered: phase %s, actions %v", d.Phase, kinds(d.Actions))
	}
}
