package fencing

import (
	"testing"
	"time"

	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/vocab"
)

// TestAgentRestartIsQuiet runs an agent's restart as a rollout makes it,
// on real gossip rings: the agent announces a restart in its own signed
// word and leaves; its next run publishes a key of its own on the node's
// Lease (against which the last run's word no longer verifies) and joins
// again. The fencer reads no power, sends no Event and counts no forgery
// for it throughout. The same word unsigned — what any gossip-key holder
// can send — counts for nothing: the node is suspected and read as after
// any leave.
func TestAgentRestartIsQuiet(t *testing.T) {
	if testing.Short() {
		t.Skip("real gossip rings")
	}
	p := testPolicy(vocab.ModeConfirmOnly)
	b := newHostileBed(t, p, "victim-1", "victim-2", "bystander")
	rec := b.fencer.cfg.Recorder.(*record.FakeRecorder)
	v := b.victims["victim-1"]
	forgeries := func() float64 {
		n := 0.0
		for _, k := range []string{forgedUnsigned, forgedBadSignature, forgedOtherBoot, forgedReplay, forgedStaleKey} {
			n += b.forgeries(k)
		}
		return n
	}
	// Reads and Events from before the restart do not count: on a loaded
	// machine the in-process rings may suspect a member falsely, and the
	// fencer rightly reads its power then.
	drainEvents(rec, v.name)
	reads, forged := v.bmc.reads.Load(), forgeries()
	quiet := func(t *testing.T, when string) {
		t.Helper()
		b.fencer.Notify(v.name) // decided again on what the fencer sees now
		// A window for a read, an Event or a forgery to show; none may.
		time.Sleep(time.Second)
		if n := v.bmc.reads.Load() - reads; n != 0 {
			t.Errorf("%s: %d power read(s) of %s", when, n, v.name)
		}
		if evs := drainEvents(rec, v.name); len(evs) != 0 {
			t.Errorf("%s: Events %q", when, evs)
		}
		if n := forgeries() - forged; n != 0 {
			t.Errorf("%s: %v forgeries counted", when, n)
		}
		b.fencer.mu.Lock()
		phase := b.fencer.phaseOf(v.name)
		b.fencer.mu.Unlock()
		if phase != "Healthy" {
			t.Errorf("%s: %s is %s", when, v.name, phase)
		}
	}

	if err := v.ring.Announce(vocab.AnnounceRestarting); err != nil {
		t.Fatal(err)
	}
	if err := v.ring.Leave(heartbeat.DefaultLeaveTimeout); err != nil {
		t.Fatal(err)
	}
	b.waitFor(20*time.Second, "the fencer sees "+v.name+" left for a restart", func() bool {
		m, _ := b.ring.Member(v.name)
		return m.State == vocab.MemberLeft && m.Meta.State == vocab.AnnounceRestarting
	})
	quiet(t, "left for a restart")

	// The next run: a key of its own, the same boot.
	next, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := publish.Publish(t.Context(), b.client, hostileNS, v.name, v.boot, next.Public(), time.Now()); err != nil {
		t.Fatal(err)
	}
	b.waitFor(10*time.Second, "the fencer sees the next run's key", func() bool {
		k, ok := b.fencer.agentKey(v.name)
		return ok && k.Key.String() == next.Public().String()
	})
	quiet(t, "the next run's key published")

	v.ring = b.join(v.name, v.boot, v.ip, next, b.isNode)
	b.waitFor(20*time.Second, "the fencer sees "+v.name+" alive again", func() bool {
		m, _ := b.ring.Member(v.name)
		return m.State == vocab.MemberAlive
	})
	quiet(t, "back in the ring")

	// The word unsigned, from a gossip-key holder: a suspicion as after any
	// leave — the node's power is read.
	// The victim is alive and refutes the forged leave within a gossip
	// round; when its refutation reaches the fencer before the leave
	// notice (a TCP stream of its own, read on its own goroutine), the
	// fencer never sees the node leave and has nothing to read — so the
	// forger sends the burst again, each time above the victim's last
	// refutation, until the fencer has seen one through.
	w := b.victims["victim-2"]
	wReads := w.bmc.reads.Load()
	incarnation, sent, bursts := uint32(5000), time.Time{}, 0
	b.waitFor(60*time.Second, w.name+"'s power is read after a forged restart", func() bool {
		if w.bmc.reads.Load() > wReads {
			return true
		}
		if time.Since(sent) > 5*time.Second {
			b.cleanShutdownBurst(w, metaFor(t, w, vocab.AnnounceRestarting, w.boot, nil, 0), incarnation, heartbeat.LeaveNotice{Node: w.name, BootID: w.boot})
			incarnation, sent, bursts = incarnation+1000, time.Now(), bursts+1
		}
		return false
	})
	t.Logf("the fencer read %s's power after %d forged burst(s)", w.name, bursts)
	if b.forgeries(forgedUnsigned) == 0 {
		t.Error("the unsigned restart was not counted as a forgery")
	}
}
