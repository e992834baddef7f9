package core

import (
	"fmt"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// TestRackDarkStormGuard: a rack of 40 goes dark in a 1000-node cluster.
// Every rack node whose power device reads off is tainted on
// that reading whatever the storm guard says — the reading is evidence,
// and a taint switches nothing. Power actions, for a node of the same
// cluster that hangs with its power on, stop as soon as more than
// maxUnhealthy of the nodes are down: so many at once is the network or
// the power feed, not node failures, and switching machines off then
// would only widen the outage.
func TestRackDarkStormGuard(t *testing.T) {
	const nodes, rack = 1000, 40
	tests := []struct {
		name         string
		maxUnhealthy float64
		alsoDown     int // unhealthy besides the rack and the hung node
		powerAction  bool
	}{
		{"rack under maxUnhealthy 50%: the hung node is switched off", 0.5, 0, true},
		{"rack under maxUnhealthy 5%", 0.05, 0, true},
		{"rack over maxUnhealthy 3%: no power action", 0.03, 0, false},
		{"rack plus 100 more over maxUnhealthy 10%: no power action", 0.10, 100, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPolicy(vocab.ModePowerOff)
			p.MaxUnhealthy = tt.maxUnhealthy
			down := rack + 1 + tt.alsoDown
			cluster := func(o *Observation) {
				o.Cluster.Nodes, o.Cluster.Unhealthy, o.Cluster.GossipAlive = nodes, down, nodes-down
			}

			// The rack: dead in gossip, then its devices read off.
			for i := range rack {
				tgt := &Target{Name: fmt.Sprintf("rack-%02d", i)}
				o := powerLoss(healthy(), t0.Add(6*time.Second))
				cluster(&o)
				if d := tgt.Step(o, p); !has(d.Actions, ActReadPower) {
					t.Fatalf("%s: no read once dead in gossip: %v (%s)", tgt.Name, kinds(d.Actions), d.Reason)
				}
				o.Now = t0.Add(7 * time.Second)
				o.BMC.Reading = reading(vocab.PowerOff, o.Now, nodeUUID)
				d := tgt.Step(o, p)
				a := find(d.Actions, ActApplyTaint)
				if a == nil || a.Evidence == nil || a.Evidence.BMC == nil || a.Evidence.BMC.Power != vocab.PowerOff {
					t.Fatalf("%s reads off: want a taint on that reading, got %v (%s)", tgt.Name, kinds(d.Actions), d.Reason)
				}
				for _, k := range []ActionKind{ActAcquireLease, ActPowerOff} {
					if has(d.Actions, k) {
						t.Fatalf("%s reads off: %s is never needed", tgt.Name, k)
					}
				}
			}

			// A node of the same cluster hangs, power on, unresponsive on
			// both channels well past fenceAfter.
			// Its reading is the one from its latest read (hung() would make
			// every one fresh), so the core must ask again to know it.
			tgt := suspected(p)
			leases, offs, reads := 0, 0, 0
			lastRead := t0.Add(100 * time.Second)
			for i := range 120 {
				o := hung(100*time.Second + time.Duration(i)*time.Second)
				o.BMC.Reading = reading(vocab.PowerOn, lastRead, nodeUUID)
				cluster(&o)
				o.Cluster.LeaseHeld = leases > 0
				d := tgt.Step(o, p)
				for _, a := range d.Actions {
					switch a.Kind {
					case ActAcquireLease:
						leases++
					case ActPowerOff:
						offs++
					case ActReadPower:
						reads++
						lastRead = o.Now
					case ActApplyTaint:
						t.Fatalf("step %d: taint of a node that reads on (%s)", i, d.Reason)
					}
				}
				if d.Phase == PhasePoweringOff && !tt.powerAction {
					t.Fatalf("step %d: powering off past the storm guard (%d of %d down, maxUnhealthy %.0f%%)", i, down, nodes, 100*tt.maxUnhealthy)
				}
			}
			if tt.powerAction && (leases == 0 || offs == 0) {
				t.Errorf("under maxUnhealthy: want the hung node switched off, got %d lease(s), %d power-off(s)", leases, offs)
			}
			if !tt.powerAction && (leases != 0 || offs != 0) {
				t.Errorf("over maxUnhealthy: %d lease(s), %d power-off(s), want none", leases, offs)
			}
			if !tt.powerAction && reads == 0 {
				t.Error("the hung node was never read again: reads must go on under the storm guard")
			}
		})
	}
}
