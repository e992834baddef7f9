package core

import (
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

func TestCombineLevels(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	on := func(device, plug string, s int) PlugRead {
		return PlugRead{Device: device, Plug: plug, Reading: &Reading{Power: vocab.PowerOn, At: t0.Add(time.Duration(s) * time.Second)}}
	}
	off := func(device, plug string, s int) PlugRead {
		return PlugRead{Device: device, Plug: plug, Reading: &Reading{Power: vocab.PowerOff, At: t0.Add(time.Duration(s) * time.Second)}}
	}
	dark := func(device, plug string) PlugRead {
		return PlugRead{Device: device, Plug: plug, Failure: &Failure{Kind: vocab.KindTimeout, Message: "no answer", At: t0}}
	}
	bmc := func(p PlugRead) LevelRead { return LevelRead{Level: 1, Plugs: []PlugRead{p}} }
	pdus := func(a, b PlugRead) LevelRead { return LevelRead{Level: 2, Plugs: []PlugRead{a, b}} }
	cases := []struct {
		name      string
		levels    []LevelRead
		power     vocab.PowerState // "" = no level decides
		level     int
		at        time.Time
		failWords []string
	}{
		// Level 0 in the want: the BMC's own reading, unchanged, as
		// without fencing topology.
		{"the BMC reads off: level 1 decides", []LevelRead{bmc(off("bmc", "", 1)), pdus(on("pdu-a", "3", 1), on("pdu-b", "3", 1))}, vocab.PowerOff, 0, t0.Add(time.Second), nil},
		{"the BMC reads on: level 1 decides, the PDUs are not asked", []LevelRead{bmc(on("bmc", "", 1)), pdus(off("pdu-a", "3", 1), off("pdu-b", "3", 1))}, vocab.PowerOn, 0, t0.Add(time.Second), nil},
		{"a PDU alone is a level like any other", []LevelRead{{Level: 1, Plugs: []PlugRead{off("pdu-a", "3", 1)}}}, vocab.PowerOff, 1, t0.Add(time.Second), nil},
		{"BMC dark, both feeds off: level 2, as old as its oldest reading", []LevelRead{bmc(dark("bmc", "")), pdus(off("pdu-a", "3", 4), off("pdu-b", "3", 2))}, vocab.PowerOff, 2, t0.Add(2 * time.Second), nil},
		{"BMC dark, one feed of two off: the machine is on", []LevelRead{bmc(dark("bmc", "")), pdus(off("pdu-a", "3", 1), on("pdu-b", "3", 1))}, vocab.PowerOn, 2, t0.Add(time.Second), nil},
		{"BMC dark, one PDU dark: nothing decides, never off", []LevelRead{bmc(dark("bmc", "")), pdus(off("pdu-a", "3", 1), dark("pdu-b", "3"))},
			"", 0, time.Time{}, []string{"level 1: bmc: timeout", "level 2: pdu-b:3: timeout"}},
		{"a reading that is neither on nor off is no reading", []LevelRead{bmc(PlugRead{Device: "bmc", Reading: &Reading{Power: vocab.PowerUnknown, At: t0}})},
			"", 0, time.Time{}, []string{`neither on nor off`}},
		{"an empty level decides nothing", []LevelRead{{Level: 1}}, "", 0, time.Time{}, []string{"level 1: no plugs"}},
		{"no levels", nil, "", 0, time.Time{}, []string{"no levels"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, f := CombineLevels(c.levels)
			if c.power == "" {
				if r != nil || f == nil {
					t.Fatalf("got reading %+v, failure %+v; want a failure", r, f)
				}
				for _, w := range c.failWords {
					if !strings.Contains(f.Message, w) {
						t.Errorf("failure %q does not say %q", f.Message, w)
					}
				}
				return
			}
			if f != nil || r == nil {
				t.Fatalf("got failure %+v; want a reading", f)
			}
			if r.Power != c.power || r.Level != c.level || !r.At.Equal(c.at) {
				t.Fatalf("got %s at level %d at %s; want %s at level %d at %s", r.Power, r.Level, r.At, c.power, c.level, c.at)
			}
			if c.level == 0 {
				if r.Plugs != nil {
					t.Fatalf("the BMC's reading grew plugs %+v", r.Plugs)
				}
				return
			}
			if want := len(c.levels[c.level-1].Plugs); len(r.Plugs) != want {
				t.Fatalf("the reading keeps %d plug readings; want every one of level %d (%d)", len(r.Plugs), c.level, want)
			}
		})
	}
}

// TestLevelEvidence: evidence from a level stands only when every plug of
// it read off; a plug of another machine voids it.
func TestLevelEvidence(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	level := func(powers ...vocab.PowerState) *Reading {
		r := &Reading{Power: vocab.PowerOff, At: t0, Level: 2, Endpoint: "level 2 (pdu-a:3, pdu-b:3)"}
		for i, p := range powers {
			r.Plugs = append(r.Plugs, Reading{Device: []string{"pdu-a", "pdu-b"}[i], Plug: "3", Power: p, At: t0})
		}
		return r
	}
	ev := func(r *Reading) Evidence {
		return Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "b", BMC: r}
	}
	if err := ev(level(vocab.PowerOff, vocab.PowerOff)).Validate(); err != nil {
		t.Fatalf("both feeds off: %v", err)
	}
	if s := ev(level(vocab.PowerOff, vocab.PowerOff)).Summary(); !strings.Contains(s, "level 2") || !strings.Contains(s, "pdu-a:3 off") || !strings.Contains(s, "pdu-b:3 off") {
		t.Errorf("summary %q does not name the level and each plug", s)
	}
	for _, bad := range []*Reading{level(vocab.PowerOff, vocab.PowerOn), level(vocab.PowerOff, vocab.PowerUnknown)} {
		if err := ev(bad).Validate(); err == nil {
			t.Errorf("evidence with plugs %+v accepted", bad.Plugs)
		}
	}
	undated := level(vocab.PowerOff, vocab.PowerOff)
	undated.Plugs[1].At = time.Time{}
	if err := ev(undated).Validate(); err == nil || !strings.Contains(err.Error(), "no time") {
		t.Errorf("a plug reading without a time: %v", err)
	}

	mixed := level(vocab.PowerOff)
	mixed.Plugs = append(mixed.Plugs, Reading{Device: "bmc", Power: vocab.PowerOff, At: t0, SystemGUID: "11111111-2222-3333-4444-555555555555", Endpoint: "ipmi://198.18.0.9:623"})
	if bad := mixed.GUIDMismatch(nodeUUID); bad == nil || bad.Endpoint != "ipmi://198.18.0.9:623" {
		t.Errorf("GUIDMismatch(%s) = %+v; want the BMC of another machine", nodeUUID, bad)
	}
	if bad := mixed.GUIDMismatch(""); bad != nil {
		t.Errorf("an unknown systemUUID proves nothing, got %+v", bad)
	}
}

// TestOffReadingOfANodeAliveInGossip is the mislabelled outlet: a node cut
// off from the API server only (NotReady, but alive in gossip all along)
// and a level that reads off — the outlet really feeds another machine.
// Its agent is asked before any taint; its answer voids the reading and
// raises the alarm. Only an agent that stays silent lets the taint go on.
func TestOffReadingOfANodeAliveInGossip(t *testing.T) {
	p := testPolicy(vocab.ModeConfirmOnly)
	start := func() (*Target, Observation, *Reading) {
		tgt := &Target{Name: "node-a"}
		o := healthy()
		o.Now = t0.Add(50 * time.Second)
		o.Node.Ready, o.Node.ReadySince = ReadyUnknown, t0.Add(45*time.Second)
		// Gossip: alive since long before, never suspected.
		o.Member.State, o.Member.Since = vocab.MemberAlive, t0
		tgt.Step(o, p)
		o.Now = o.Now.Add(300 * time.Millisecond)
		r, _ := CombineLevels([]LevelRead{{Level: 1, Plugs: []PlugRead{{Device: "pdu-a", Plug: "7",
			Reading: &Reading{Power: vocab.PowerOff, At: o.Now, Endpoint: "fence_apc_snmp://198.18.0.1/7"}}}}})
		o.BMC.Reading = r
		d := tgt.Step(o, p)
		if has(d.Actions, ActApplyTaint) || !has(d.Actions, ActChallenge) {
			t.Fatalf("off reading of a node alive in gossip: %v (reason %q); want a challenge, no taint", kinds(d.Actions), d.Reason)
		}
		return tgt, o, r
	}
	t.Run("the agent answers: void, alarm, never a taint", func(t *testing.T) {
		tgt, o, r := start()
		o.Now = r.At.Add(time.Second)
		o.Agent = AgentObs{LastProof: o.Now}
		d := tgt.Step(o, p)
		if a := find(d.Actions, ActSafetyAlarm); has(d.Actions, ActApplyTaint) || a == nil || a.Reason != vocab.EventPowerReadingContradicted {
			t.Fatalf("agent answered: %v (reason %q)", kinds(d.Actions), d.Reason)
		}
		for i := 0; i < 30; i++ {
			o.Now = o.Now.Add(time.Second)
			d := tgt.Step(o, p)
			if has(d.Actions, ActApplyTaint) {
				t.Fatalf("tainted on the contradicted reading %s later", o.Now.Sub(r.At))
			}
			if has(d.Actions, ActReadPower) && o.Now.Sub(r.At) < p.ReadBackoffMax {
				t.Fatalf("the contradicted device is read again after %s; want the longest pause, %s", o.Now.Sub(r.At), p.ReadBackoffMax)
			}
		}
		// The device keeps saying off, the agent keeps answering: no
		// taint, and no second alarm in the same suspicion.
		for i := 0; i < 3; i++ {
			o.Now = o.Now.Add(p.ReadBackoffMax)
			o.BMC.Reading = &Reading{Power: vocab.PowerOff, At: o.Now, Level: 1, Plugs: r.Plugs, Endpoint: r.Endpoint}
			o.Agent = AgentObs{LastProof: o.Now.Add(time.Second)}
			o.Now = o.Now.Add(2 * time.Second)
			d := tgt.Step(o, p)
			if has(d.Actions, ActApplyTaint) || has(d.Actions, ActSafetyAlarm) {
				t.Fatalf("repeat %d: %v (reason %q)", i, kinds(d.Actions), d.Reason)
			}
		}
	})
	t.Run("the agent is silent: the taint goes on", func(t *testing.T) {
		tgt, o, r := start()
		o.Now = r.At.Add(2 * time.Second)
		o.Agent = AgentObs{SilentSince: r.At.Add(100 * time.Millisecond), LastSilent: r.At.Add(100 * time.Millisecond)}
		if d := tgt.Step(o, p); !has(d.Actions, ActApplyTaint) {
			t.Fatalf("agent silent: %v (reason %q)", kinds(d.Actions), d.Reason)
		}
	})
}
