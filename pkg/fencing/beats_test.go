package fencing

import (
	"slices"
	"testing"
	"time"

	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/vocab"
)

// TestForgedBeatsOnlyDelay: beats carry nothing a decision rests on.
// Forged — in both forms, sealed and through memberlist, by a holder of
// the gossip key — in a live node's name, they change nothing: no read,
// no harm.
// Forged in the name of a node that lost power — taken for its own, so
// its beats never look stopped — they keep nothing from being fenced on
// gossip's verdict, its power reading and its agent's silence: at most
// they delay it to that verdict.
func TestForgedBeatsOnlyDelay(t *testing.T) {
	if testing.Short() {
		t.Skip("real gossip rings")
	}
	b := newHostileBed(t, testPolicy(vocab.ModeConfirmOnly), "victim-1", "bystander")
	v1 := b.victims["victim-1"]
	b.waitFor(20*time.Second, "the fencer has the victims' beats", func() bool { return b.ring.BeatsReceived() > 10 })
	forge := func(name string) (stop func()) {
		done := make(chan struct{})
		to := b.ring.LocalAddr()
		sealed, err := heartbeat.SealBeat(hostileGossipKey, hostileLabel, name)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					_ = b.forger.UserUDP(to, heartbeat.EncodeBeat(name))
					_ = b.forger.Datagram(to, sealed)
				}
			}
		}()
		return func() { close(done) }
	}

	stop := forge("bystander")
	b.assertNoHarm(2 * time.Second)
	stop()
	if n := b.victims["bystander"].bmc.reads.Load(); n != 0 {
		t.Errorf("forged beats of a live node made %d power reads", n)
	}

	stop = forge("victim-1")
	t.Cleanup(stop)
	before := b.ring.BeatsReceived()
	v1.bmc.power.Store(vocab.PowerOff)
	if err := v1.ring.Shutdown(); err != nil {
		t.Fatal(err)
	}
	b.waitFor(time.Minute, "victim-1 fenced", func() bool { return slices.Contains(b.tainted(), "victim-1") })
	if m, _ := b.ring.Member("victim-1"); m.State == vocab.MemberAlive {
		t.Errorf("victim-1 fenced while gossip still says it is alive: its beats, forged, cannot have stopped")
	}
	t.Logf("%d beats taken meanwhile, forged ones among them", b.ring.BeatsReceived()-before)
}
