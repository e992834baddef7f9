package fencing

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/vocab"
)

// Field conditions at the fencer's level: real gossip rings,
// the real Fencer and Tainter, an attacker with the gossip key.

// TestMislabelledPlugFalseDeathOfAReadyNode: victim-1 is Ready and its
// agent alive, but its configured power device feeds another machine,
// which is off. One dead at memberlist's top incarnation — what a false
// suspicion under CPU starvation also gives — makes the fencer read the
// device. The agent, challenged with the read, answers: no taint, and the
// contradiction is a safety alarm.
func TestMislabelledPlugFalseDeathOfAReadyNode(t *testing.T) {
	if testing.Short() {
		t.Skip("real gossip rings")
	}
	b := newHostileBed(t, testPolicy(vocab.ModeConfirmOnly), "victim-1", "victim-2", "victim-3")
	v1 := b.victims["victim-1"]
	v1.bmc.power.Store(vocab.PowerOff) // the plug of another machine, off
	if err := b.forger.Dead(b.ring.LocalAddr(), v1.name, ^uint32(0), "fencer"); err != nil {
		t.Fatal(err)
	}
	b.waitFor(10*time.Second, "the fencer reads the mislabelled device", func() bool { return v1.bmc.reads.Load() > 0 })
	b.waitFor(20*time.Second, "the safety alarm", func() bool {
		return b.alarms(string(vocab.EventPowerReadingContradicted)) > 0
	})
	b.assertNoHarm(10 * time.Second)
	if m, _ := b.ring.Member(v1.name); m.State != vocab.MemberDead {
		t.Fatalf("the fencer's gossip view says %s: the test did not keep the false death", m.State)
	}
}

// TestForgedFencerDeathCannotSilenceAgents: in power-off mode, one forged
// "the fencer is dead" (top incarnation, unrefutable) sent to every agent
// must not make them ignore its challenges: victim-1, whose kubelet is cut
// off from the API (NotReady) and whose gossip death is forged too, keeps
// answering, so it is never switched off.
func TestForgedFencerDeathCannotSilenceAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("real gossip rings")
	}
	b := newPowerOffBed(t)
	v1 := b.victims["victim-1"]
	for _, v := range b.victims {
		if err := b.forger.Dead(v.ring.LocalAddr(), "fencer", ^uint32(0), v.name); err != nil {
			t.Fatal(err)
		}
	}
	b.waitFor(10*time.Second, "every agent sees the fencer dead", func() bool {
		for _, v := range b.victims {
			if m, _ := v.ring.Member("fencer"); m.State == vocab.MemberAlive {
				return false
			}
		}
		return true
	})
	n, _ := b.client.CoreV1().Nodes().Get(context.Background(), v1.name, metav1.GetOptions{})
	n.Status.Conditions[0].Status = "Unknown"
	if _, err := b.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.forger.Dead(b.ring.LocalAddr(), v1.name, ^uint32(0), "fencer"); err != nil {
		t.Fatal(err)
	}
	b.waitFor(20*time.Second, "victim-1 answers the fencer's challenge", func() bool {
		b.fencer.mu.Lock()
		defer b.fencer.mu.Unlock()
		s := b.fencer.state[v1.name]
		return s != nil && !s.agent.LastProof.IsZero()
	})
	b.assertNoHarm(8 * time.Second) // past fenceAfter and the fence delay, several times
	if v1.bmc.reads.Load() == 0 {
		t.Fatal("the fencer never read victim-1's BMC: the test did not reach the power-off decision")
	}
}

func (b *hostileBed) alarms(reason string) float64 {
	return testutil.ToFloat64(b.fencer.cfg.Metrics.SafetyAlarms.WithLabelValues(reason))
}

// TestMonitorFindsAMislabelledPlugBeforeAnOutage: the device monitor reads
// the levels of Ready nodes; victim-1's reads off while its agent answers,
// so the inventory is wrong: one safety alarm, before any failure. A Ready
// node whose device reads on, and one whose agent is gone, raise none.
func TestMonitorFindsAMislabelledPlugBeforeAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("real gossip rings")
	}
	b := newHostileBed(t, testPolicy(vocab.ModeConfirmOnly), "victim-1", "victim-2", "victim-3")
	b.victims["victim-1"].bmc.power.Store(vocab.PowerOff)
	// victim-3 really lost its power: off, and its agent gone.
	b.victims["victim-3"].bmc.power.Store(vocab.PowerOff)
	b.victims["victim-3"].ring.Shutdown()
	for round := range 3 {
		b.fencer.monitorRound(t.Context())
		if got := b.alarms(string(vocab.EventPowerDeviceReadsOffLiveNode)); got != 1 {
			t.Fatalf("round %d: %v %s alarms, want 1", round, got, vocab.EventPowerDeviceReadsOffLiveNode)
		}
	}
	for _, n := range b.tainted() {
		if n != "victim-3" {
			t.Fatalf("%s tainted", n)
		}
	}
	// Fixed inventory: the alarm is raised again only after a new finding.
	b.victims["victim-1"].bmc.power.Store(vocab.PowerOn)
	b.fencer.monitorRound(t.Context())
	b.fencer.mu.Lock()
	misfed := b.fencer.state["victim-1"] != nil && b.fencer.state["victim-1"].misfed
	b.fencer.mu.Unlock()
	if misfed {
		t.Fatal("the finding outlived the fix")
	}
}
