package heartbeat

import (
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/vocab"
)

// TestBeatsTellASilentMemberFirst: a fencer learns that a member stopped —
// shut down without leaving, as by a power loss — from its beats, long
// before gossip calls it dead (gossip's timings slowed here to those of a
// big ring: its verdict takes seconds); the member's beats stopping is one
// change, and a member that beats again is no longer silent. Observers
// keep no Detector: only fencers judge beats.
func TestBeatsTellASilentMemberFirst(t *testing.T) {
	cfg := func(name string) Config {
		c := fastConfig(t, name, 0)
		c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult = time.Second, 500*time.Millisecond, 6
		c.BeatInterval = 100 * time.Millisecond
		return c
	}
	f := start(t, cfg("fencer"), Options{Meta: Meta{BootID: "boot-fencer", Role: RoleFencer, Agent: "test"}})
	a := start(t, cfg("a"), Options{Seeds: seedsOf(f.LocalAddr())})
	b := start(t, cfg("b"), Options{Seeds: seedsOf(f.LocalAddr())})
	poll.Until(t, settle, "the fencer sees all three alive", func() bool { return f.Alive() == 3 })
	poll.Until(t, settle, "the fencer has beats of a and b", func() bool {
		return f.detector.Silence("a", time.Now()).Known && f.detector.Silence("b", time.Now()).Known
	})
	if a.detector != nil || b.detector != nil {
		t.Error("an observer keeps a Detector")
	}
	time.Sleep(quietFor) // a window for a false silence to show; none may
	for _, m := range changesOf(t, f) {
		if m.Silent {
			t.Fatalf("%s reported silent while it beat", m.Name)
		}
	}

	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	m := waitEvent(t, f, settle, "a silent", func(m Member) bool { return m.Name == "a" && m.Silent })
	silent := time.Since(stopped)
	if m.State != vocab.MemberAlive {
		t.Errorf("a was %s before its silence was told: gossip was faster than the beats", m.State)
	}
	waitEvent(t, f, settle, "a dead", func(m Member) bool { return m.Name == "a" && m.State == vocab.MemberDead })
	dead := time.Since(stopped)
	if mb, _ := f.Member("b"); mb.Silent {
		t.Error("b, which beats on, is silent")
	}
	t.Logf("a stopped: silent to the fencer after %s, dead in gossip after %s", silent.Round(time.Millisecond), dead.Round(time.Millisecond))
}

// TestBeatAgain: a silent member's next beat makes it beating again (one
// change); beats in the name of a member this agent does not see alive —
// unknown, or dead — are dropped and leave no trace in the Detector, so
// that what a forger sends cannot grow it; a beat that does not decode is
// ignored.
func TestBeatAgain(t *testing.T) {
	r := newRing("fencer", testLogger(t, "fencer"), nil)
	r.detector = NewDetector(DetectorConfig{})
	r.members["a"] = &Member{Name: "a", State: vocab.MemberAlive, Silent: true, SilentSince: time.Now().Add(-time.Minute)}
	r.members["gone"] = &Member{Name: "gone", State: vocab.MemberDead}
	var changes []Member
	r.OnChange(func(m Member) { changes = append(changes, m) })
	d := (*delegate)(r)

	d.NotifyMsg(EncodeBeat("a"))
	if m, _ := r.Member("a"); m.Silent || len(changes) != 1 || changes[0].Silent {
		t.Fatalf("after a's beat: %+v, changes %+v", m, changes)
	}
	d.NotifyMsg(EncodeBeat("a"))
	if len(changes) != 1 {
		t.Errorf("a second beat was a change: %+v", changes)
	}
	for _, name := range []string{"gone", "nobody", "fencer"} {
		d.NotifyMsg(EncodeBeat(name))
		if r.detector.Silence(name, time.Now()).Known {
			t.Errorf("a beat of %s was counted", name)
		}
	}
	for _, buf := range [][]byte{{msgBeat}, append([]byte{msgBeat}, make([]byte, maxNameLen+1)...)} {
		if _, ok := decodeBeat(buf); ok {
			t.Errorf("decoded a beat of %d bytes", len(buf))
		}
	}
}
