package core

import (
	"slices"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// TestEvidenceFromNewerFencedIsLeftAlone: a node fenced by a newer fenced,
// whose evidence this fencer cannot read (a rolling upgrade, or a rollback
// after one), is left alone whatever this fencer was doing and whatever the
// node does: no recovery, no taint removal, no re-fence, no Ready=False, no
// pod deletion, no power action — only the Warning, once, and giving back a
// power Lease this fencer held. Once the newer fenced removes its taint,
// the node is Healthy again here; once the annotation is readable, the
// fence is adopted as any other.
func TestEvidenceFromNewerFencedIsLeftAlone(t *testing.T) {
	p := testPolicy(vocab.ModePowerOff)
	own := &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0.Add(10 * time.Second), BootID: "boot-1",
		BMC: reading(vocab.PowerOff, t0.Add(10*time.Second), nodeUUID)}
	starts := []struct {
		name  string
		phase Phase // the phase this fencer is in when the newer fence shows
		setup func(t *testing.T, tgt *Target, o *Observation)
	}{
		{"healthy", PhaseHealthy, func(t *testing.T, tgt *Target, o *Observation) {}},
		{"confirming, a reading of off in hand", PhaseConfirming, func(t *testing.T, tgt *Target, o *Observation) {
			*o = powerLoss(*o, t0.Add(6*time.Second))
			tgt.Step(*o, testPolicy(vocab.ModeConfirmOnly))
			o.BMC.Reading = reading(vocab.PowerOn, t0.Add(6100*time.Millisecond), nodeUUID)
			o.Now = t0.Add(6200 * time.Millisecond)
			tgt.Step(*o, testPolicy(vocab.ModeConfirmOnly))
			o.BMC.Reading = reading(vocab.PowerOff, t0.Add(6500*time.Millisecond), nodeUUID)
		}},
		{"powering off under the Lease, the power-off running", PhasePoweringOff, func(t *testing.T, tgt *Target, o *Observation) {
			var sub *Target
			sub, *o = runSteps(t, p, powerLoss(healthy(), t0.Add(6*time.Second)), stepsToPowerOff())
			*tgt = *sub
		}},
		{"fenced on its own evidence", PhaseFenced, func(t *testing.T, tgt *Target, o *Observation) {
			*o = powerLoss(*o, t0.Add(6*time.Second))
			o.Node.TaintedByFenced, o.Node.Evidence = true, own
			tgt.Step(*o, p)
		}},
	}
	// What the node does while the newer fence stands: each would make a
	// fencer that read the evidence act.
	worlds := []struct {
		name   string
		change func(o *Observation)
	}{
		{"down, Ready=True not yet updated", func(o *Observation) {}},
		{"down, NotReady, BMC reads off", func(o *Observation) {
			o.Node.Ready, o.Node.ReadySince = ReadyUnknown, o.Now
			o.Member.State = vocab.MemberDead
			o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
		}},
		{"back Ready on a new boot, no attachment left", func(o *Observation) {
			o.Node.Ready, o.Node.ReadySince, o.Node.BootID = ReadyTrue, o.Now, "boot-2"
			o.Member = MemberObs{Known: true, State: vocab.MemberAlive, Since: o.Now, BootID: "boot-2", Announced: vocab.AnnounceRunning, Signed: true}
			o.Agent = AgentObs{LastProof: o.Now}
			o.BMC.Reading = reading(vocab.PowerOn, o.Now, nodeUUID)
		}},
		{"back Ready on the same boot", func(o *Observation) {
			o.Node.Ready, o.Node.ReadySince, o.Node.BootID = ReadyTrue, o.Now, "boot-1"
			o.Member = MemberObs{Known: true, State: vocab.MemberAlive, Since: o.Now, BootID: "boot-1", Announced: vocab.AnnounceRunning, Signed: true}
		}},
	}
	allowedActions := []ActionKind{ActEvent, ActReleaseLease}
	for _, start := range starts {
		for _, world := range worlds {
			t.Run(start.name+"/"+world.name, func(t *testing.T) {
				tgt := &Target{Name: "node-a"}
				o := healthy()
				start.setup(t, tgt, &o)
				if tgt.phase() != start.phase {
					t.Fatalf("setup: phase %s, want %s", tgt.phase(), start.phase)
				}
				leaseHeld := o.Cluster.LeaseHeld
				// The newer fenced's taint lands.
				o.Node.TaintedByFenced, o.Node.Evidence, o.Node.NewerEvidenceFormat = true, nil, 2
				warnings := 0
				for i := range 4 {
					o.Now = o.Now.Add(20 * time.Second)
					if i == 1 {
						world.change(&o)
					}
					before := tgt.Phase
					d := tgt.Step(o, p)
					checkTransitions(t, "newer fence", before, d)
					if d.Phase != PhaseFenced {
						t.Fatalf("step %d: phase %s (reason %q)", i, d.Phase, d.Reason)
					}
					for _, a := range d.Actions {
						if !slices.Contains(allowedActions, a.Kind) {
							t.Fatalf("step %d: %s on a node whose evidence it cannot read (actions %v, reason %q)", i, a.Kind, kinds(d.Actions), d.Reason)
						}
						if a.Kind == ActReleaseLease && !leaseHeld {
							t.Fatalf("step %d: released a Lease it did not hold", i)
						}
						if a.Kind == ActEvent {
							if a.Reason != vocab.EventEvidenceFromNewerFenced || a.EventType != "Warning" {
								t.Fatalf("step %d: event %s %s: %s", i, a.EventType, a.Reason, a.Message)
							}
							warnings++
							for _, s := range []string{"newer fenced (format 2)", "node-a", "upgrade this fencer"} {
								if !strings.Contains(a.Message, s) {
									t.Errorf("warning %q does not say %q", a.Message, s)
								}
							}
						}
					}
					if !strings.Contains(d.Reason, "newer fenced") {
						t.Errorf("step %d: reason %q", i, d.Reason)
					}
					o.Cluster.LeaseHeld = false // released, as the fencer does
				}
				if warnings != 1 {
					t.Errorf("%d EvidenceFromNewerFenced warnings; want one", warnings)
				}

				// The newer fenced removes its taint (the node recovered):
				// this fencer starts over from what the node looks like.
				after := o
				after.Now = o.Now.Add(time.Second)
				after.Node.TaintedByFenced, after.Node.NewerEvidenceFormat = false, 0
				cleared := *tgt
				d := cleared.Step(after, p)
				if has(d.Actions, ActApplyTaint) || has(d.Actions, ActRemoveTaint) || d.Phase == PhaseFenced {
					t.Fatalf("taint removed by the newer fenced: phase %s, actions %v (reason %q)", d.Phase, kinds(d.Actions), d.Reason)
				}

				// This fencer is upgraded, or the annotation rewritten in a
				// format it reads: the fence is adopted, and judged as any.
				readable := o
				readable.Now = o.Now.Add(time.Second)
				readable.Node.NewerEvidenceFormat, readable.Node.Evidence = 0, own
				d = tgt.Step(readable, p)
				if d.Phase != PhaseFenced && d.Phase != PhaseRecovering && d.Phase != PhaseReturning && d.Phase != PhaseHealthy || tgt.fence.unreadable {
					t.Fatalf("readable again: phase %s, unreadable %v (reason %q)", d.Phase, tgt.fence.unreadable, d.Reason)
				}
				if d.Phase == PhaseFenced && tgt.fence.evidence != own {
					t.Fatalf("readable again: the fence's evidence is %+v, not the annotation's", tgt.fence.evidence)
				}
			})
		}
	}
}

// TestEvidenceFromNewerFencedBackOnANewBoot is the case the rule exists
// for, against the one a fencer that read the newer annotation as its own
// format would get wrong: back on a new boot, a readable fence is
// recovered (the taint removed); an unreadable one is not.
func TestEvidenceFromNewerFencedBackOnANewBoot(t *testing.T) {
	ev := &Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0.Add(10 * time.Second), BootID: "boot-1",
		BMC: reading(vocab.PowerOff, t0.Add(10*time.Second), nodeUUID)}
	for _, tc := range []struct {
		name   string
		newer  int
		remove bool
	}{
		{"format this fencer reads", 0, true},
		{"newer format", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := healthy()
			o.Now = t0.Add(time.Minute)
			o.Node.TaintedByFenced, o.Node.BootID, o.Node.ReadySince = true, "boot-2", t0.Add(50*time.Second)
			if tc.newer > 0 {
				o.Node.NewerEvidenceFormat = tc.newer
			} else {
				o.Node.Evidence = ev
			}
			d := (&Target{Name: "node-a"}).Step(o, testPolicy(vocab.ModeConfirmOnly))
			if has(d.Actions, ActRemoveTaint) != tc.remove {
				t.Fatalf("RemoveTaint %v, want %v: phase %s, actions %v (reason %q)", has(d.Actions, ActRemoveTaint), tc.remove, d.Phase, kinds(d.Actions), d.Reason)
			}
		})
	}
}
