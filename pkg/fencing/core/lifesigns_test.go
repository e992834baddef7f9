package core

import (
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// A Ready node whose configured plug feeds another machine that is off (a
// mislabelled outlet), with one false — or forged, at memberlist's top
// incarnation — gossip death: the kubelet still shows life, so an off
// reading is used only once the agent, asked together with the read, stays
// silent. The live agent answers, the reading is void, and that is a
// safety alarm; never a taint.
func TestReadyNodeMislabelledPlugFalseGossipDeath(t *testing.T) {
	for _, tc := range []struct {
		name string
		life func(*Observation) // the sign of life the kubelet gives
		// when the challenge goes out: with the read, or at the renewal
		asked, renewed []ActionKind
	}{
		{"Ready=True", func(o *Observation) {}, []ActionKind{ActReadPower, ActChallenge}, nil},
		{"Ready=Unknown but its Lease renewed since the suspicion began", func(o *Observation) {
			o.Node.Ready, o.Node.ReadySince = ReadyUnknown, t0.Add(5*time.Second)
		}, []ActionKind{ActReadPower}, []ActionKind{ActChallenge}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy(vocab.ModeConfirmOnly)
			steps := []step{
				{name: "healthy", phase: PhaseHealthy},
				{name: "gossip dead, kubelet alive: read and challenge together", at: 6 * time.Second, change: func(o *Observation) {
					o.Member.State, o.Member.Since = "dead", o.Now
					tc.life(o)
				}, want: tc.asked, notWant: []ActionKind{ActApplyTaint}},
				{name: "the kubelet's heartbeat goes on", at: 6100 * time.Millisecond, change: func(o *Observation) {
					o.BMC.InFlight = true
					o.Node.KubeletRenew = o.Now
				}, want: tc.renewed, notWant: []ActionKind{ActApplyTaint}},
				{name: "the challenge in flight", at: 6150 * time.Millisecond, change: func(o *Observation) {
					o.Agent.Challenging = true
				}, notWant: []ActionKind{ActApplyTaint, ActChallenge}},
				{name: "the wrong plug reads off before the agent answers", at: 6200 * time.Millisecond, change: func(o *Observation) {
					o.BMC.InFlight = false
					o.BMC.Reading = reading(vocab.PowerOff, o.Now, "")
					o.BMC.Reading.KubeletLeaseRenewedAt = o.Node.KubeletRenew
				}, phase: PhaseConfirming, notWant: []ActionKind{ActApplyTaint}},
				{name: "the agent answers: the reading is void, an alarm", at: 6300 * time.Millisecond, change: func(o *Observation) {
					o.Agent = AgentObs{LastProof: o.Now}
				}, notWant: []ActionKind{ActApplyTaint}, event: vocab.EventPowerReadingContradicted},
			}
			tgt, o := runSteps(t, p, healthy(), steps)
			// Whatever the plug goes on saying, no taint while the agent answers.
			for i := range 20 {
				o.Now = o.Now.Add(3 * time.Second)
				o.BMC.Reading = reading(vocab.PowerOff, o.Now, "")
				o.Agent = AgentObs{LastProof: o.Now.Add(time.Second)}
				if i%2 == 0 {
					o.Agent = AgentObs{LastProof: o.Now.Add(-time.Second)}
				}
				if d := tgt.Step(o, p); has(d.Actions, ActApplyTaint) {
					t.Fatalf("round %d: tainted a live node: %s", i, d.Reason)
				}
			}
		})
	}
}

// The same false death of a node that really lost power: the agent's
// silence to the challenge sent with the read completes the evidence, so
// the fast path stays fast.
func TestPowerLossWhileStillReadyNeedsTheAgentsSilence(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	start := healthy()
	steps := []step{
		{name: "gossip dead, still Ready", at: 6 * time.Second, change: func(o *Observation) {
			o.Member.State, o.Member.Since = "dead", o.Now
		}, want: []ActionKind{ActReadPower, ActChallenge}},
		{name: "off before the challenge's outcome", at: 6200 * time.Millisecond, change: func(o *Observation) {
			o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
			o.Agent.Challenging = true
		}, phase: PhaseConfirming, notWant: []ActionKind{ActApplyTaint, ActChallenge}},
		{name: "silent: fenced", at: 6500 * time.Millisecond, change: func(o *Observation) {
			o.Agent = AgentObs{SilentSince: t0.Add(6 * time.Second), LastSilent: t0.Add(6 * time.Second)}
		}, phase: PhaseFenced, want: []ActionKind{ActApplyTaint}},
	}
	runSteps(t, p, start, steps)

	// A silence from before this suspicion proves nothing about it.
	o := healthy()
	o.Agent = AgentObs{SilentSince: t0, LastSilent: t0}
	o.Now = t0.Add(6 * time.Second)
	o.Member.State, o.Member.Since = "dead", o.Now
	tgt := &Target{Name: "node-a"}
	if d := tgt.Step(o, p); !has(d.Actions, ActChallenge) {
		t.Fatalf("no challenge: %v", kinds(d.Actions))
	}
	o.Now = o.Now.Add(time.Second)
	o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
	if d := tgt.Step(o, p); has(d.Actions, ActApplyTaint) {
		t.Fatalf("tainted on an old silence: %s", d.Reason)
	}
}

// The kubelet writes Ready=True again after the fence, on the fenced boot,
// while gossip (forged) still says dead: the node never went off. That is
// the safety alarm, once; no write war over Ready.
func TestKubeletReadyAgainAfterFenceIsASafetyAlarm(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	o := healthy()
	fenceAt := t0.Add(6 * time.Second)
	o.Node.TaintedByFenced = true
	o.Node.Evidence = &Evidence{Method: "bmc-power-off", At: fenceAt, BootID: "boot-1", BMC: reading(vocab.PowerOff, fenceAt, "")}
	o.Member.State, o.Member.Since = "dead", t0.Add(5*time.Second)
	tgt := &Target{Name: "node-a"}
	o.Now = t0.Add(7 * time.Second)
	// The stale Ready=True from before the fence: fenced writes NotReady.
	if d := tgt.Step(o, p); !has(d.Actions, ActMarkNotReady) || has(d.Actions, ActSafetyAlarm) {
		t.Fatalf("stale Ready: %v", kinds(d.Actions))
	}
	alarms := 0
	for i := range 10 {
		// The kubelet puts Ready=True back after each write.
		o.Now = o.Now.Add(time.Second)
		o.Node.Ready, o.Node.ReadySince = ReadyTrue, o.Now.Truncate(time.Second)
		d := tgt.Step(o, p)
		if has(d.Actions, ActMarkNotReady) || has(d.Actions, ActRemoveTaint) {
			t.Fatalf("round %d: %v (reason %q)", i, kinds(d.Actions), d.Reason)
		}
		if a := find(d.Actions, ActSafetyAlarm); a != nil && a.Reason == vocab.EventFencedNodeBackWithSameBootID {
			alarms++
		}
	}
	if alarms != 1 {
		t.Fatalf("%d alarms, want 1", alarms)
	}
}
