package heartbeat

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"fenced.io/fenced/pkg/vocab"
)

// newViewRing is a Ring without memberlist, to drive the delegate
// callbacks directly in the order a test needs. It is built by the
// production constructor, so that it has every map and channel a Ring
// from Join has.
func newViewRing(t *testing.T, isNode func(string) bool) *Ring {
	t.Helper()
	return newRing("self", testLogger(t, "self"), isNode)
}

// mlNode is memberlist's view of a running observer.
func mlNode(t *testing.T, name, boot string) *memberlist.Node {
	t.Helper()
	return mlNodeIn(t, name, boot, vocab.AnnounceRunning)
}

// mlNodeIn is memberlist's view of an observer that announces state.
func mlNodeIn(t *testing.T, name, boot string, state vocab.Announcement) *memberlist.Node {
	t.Helper()
	b, err := Meta{Version: MetaVersion, Node: name, BootID: boot, Role: RoleObserver, State: state}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &memberlist.Node{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: 7946, Meta: b}
}

// TestLeftOrDead drives the delegate through the orders in which a leave
// notice and memberlist's leave can arrive.
func TestLeftOrDead(t *testing.T) {
	cases := []struct {
		name  string
		steps func(d *delegate, n *memberlist.Node)
		want  vocab.MemberState
	}{
		{"no notice", func(d *delegate, n *memberlist.Node) { d.NotifyLeave(n) }, vocab.MemberDead},
		{"notice then leave", func(d *delegate, n *memberlist.Node) {
			d.NotifyMsg(EncodeLeaveNotice(LeaveNotice{Node: "x", BootID: "boot-1"}))
			d.NotifyLeave(n)
		}, vocab.MemberLeft},
		{"leave then notice", func(d *delegate, n *memberlist.Node) {
			d.NotifyLeave(n)
			d.NotifyMsg(EncodeLeaveNotice(LeaveNotice{Node: "x", BootID: "boot-1"}))
		}, vocab.MemberLeft},
		{"notice of another boot", func(d *delegate, n *memberlist.Node) {
			d.NotifyMsg(EncodeLeaveNotice(LeaveNotice{Node: "x", BootID: "boot-0"}))
			d.NotifyLeave(n)
		}, vocab.MemberDead},
		{"late notice of another boot", func(d *delegate, n *memberlist.Node) {
			d.NotifyLeave(n)
			d.NotifyMsg(EncodeLeaveNotice(LeaveNotice{Node: "x", BootID: "boot-0"}))
		}, vocab.MemberDead},
		{"notice forgotten when the member comes back", func(d *delegate, n *memberlist.Node) {
			d.NotifyMsg(EncodeLeaveNotice(LeaveNotice{Node: "x", BootID: "boot-1"}))
			d.NotifyLeave(n)
			d.NotifyJoin(n)
			d.NotifyLeave(n)
		}, vocab.MemberDead},
		{"stale notice", func(d *delegate, n *memberlist.Node) {
			d.NotifyMsg(EncodeLeaveNotice(LeaveNotice{Node: "x", BootID: "boot-1"}))
			r := (*Ring)(d)
			r.mu.Lock()
			h := r.leaving["x"]
			h.at = h.at.Add(-leaveNoticeTTL)
			r.leaving["x"] = h
			r.mu.Unlock()
			d.NotifyLeave(n)
		}, vocab.MemberDead},
		{"memberlist that reports left", func(d *delegate, n *memberlist.Node) {
			left := *n
			left.State = memberlist.StateLeft
			d.NotifyLeave(&left)
		}, vocab.MemberLeft},
		{"garbage message ignored", func(d *delegate, n *memberlist.Node) {
			d.NotifyMsg([]byte{msgLeaveNotice, '{'})
			d.NotifyMsg([]byte{99, '{', '}'})
			d.NotifyLeave(n)
		}, vocab.MemberDead},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newViewRing(t, nil)
			d := (*delegate)(r)
			n := mlNode(t, "x", "boot-1")
			d.NotifyJoin(n)
			tc.steps(d, n)
			m, ok := r.Member("x")
			if !ok || m.State != tc.want {
				t.Fatalf("x is %+v, want %s", m, tc.want)
			}
			if m.Meta.BootID != "boot-1" || m.Addr != "127.0.0.1:7946" {
				t.Errorf("last meta or address lost: %+v", m)
			}
		})
	}
}

func TestViewTransitionsAndEvents(t *testing.T) {
	r := newViewRing(t, nil)
	record(r)
	d := (*delegate)(r)
	d.NotifyJoin(mlNode(t, "self", "boot-s"))
	x := mlNode(t, "x", "boot-1")
	d.NotifyJoin(x)
	if r.Alive() != 2 {
		t.Fatalf("Alive() = %d", r.Alive())
	}
	joined, _ := r.Member("x")

	d.NotifyUpdate(x) // same meta: no change, no event
	time.Sleep(time.Millisecond)
	d.NotifyLeave(x)
	dead, _ := r.Member("x")
	if !dead.Since.After(joined.Since) {
		t.Errorf("Since not moved on a state change: %v then %v", joined.Since, dead.Since)
	}
	select {
	case <-r.lonely:
	default:
		t.Error("losing the last peer did not wake the join loop")
	}
	d.NotifyJoin(mlNode(t, "x", "boot-2")) // back after a reboot

	// Every change, in order, and nothing for the update that changed
	// nothing.
	type change struct {
		name  string
		state vocab.MemberState
		boot  string
	}
	want := []change{{"self", vocab.MemberAlive, "boot-s"}, {"x", vocab.MemberAlive, "boot-1"},
		{"x", vocab.MemberDead, "boot-1"}, {"x", vocab.MemberAlive, "boot-2"}}
	var got []change
	for _, m := range changesOf(t, r) {
		got = append(got, change{m.Name, m.State, m.Meta.BootID})
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes = %+v, want %+v", got, want)
	}
	if m, _ := r.Member("x"); m.State != vocab.MemberAlive || m.Meta.BootID != "boot-2" || !m.Since.After(dead.Since) {
		t.Errorf("x after reboot = %+v", m)
	}
}

// TestOnChangeReadsTheView: the handler is called with the Ring's lock
// released and the change already in the view, so a handler that reads
// the view (as the fencer's sync does) neither deadlocks nor sees an older
// state. A deadlock here hangs the test until its timeout.
func TestOnChangeReadsTheView(t *testing.T) {
	r := newViewRing(t, nil)
	var mismatches []string
	r.OnChange(func(m Member) {
		if got, ok := r.Member(m.Name); !ok || got.State != m.State || got.Meta != m.Meta {
			mismatches = append(mismatches, m.Name)
		}
		_ = r.Alive()
		_ = r.Members()
	})
	d := (*delegate)(r)
	x := mlNode(t, "x", "boot-1")
	d.NotifyJoin(x)
	d.NotifyLeave(x)
	d.NotifyJoin(mlNode(t, "x", "boot-2"))
	if len(mismatches) > 0 {
		t.Errorf("the view lagged the change for %v", mismatches)
	}
}

func TestNotifyAlive(t *testing.T) {
	nodes := map[string]bool{"x": true, "y": true}
	r := newViewRing(t, func(name string) bool { return nodes[name] })
	d := (*delegate)(r)
	future := []byte(`{"v":2,"node":"y","boot":"b","extra":{"k":1}}`)
	cases := []struct {
		name string
		node *memberlist.Node
		ok   bool
	}{
		{"a node", mlNode(t, "x", "b"), true},
		{"self, even if not a node", mlNode(t, "self", "b"), true},
		{"future meta version", &memberlist.Node{Name: "y", Meta: future}, true},
		{"not a node", mlNode(t, "z", "b"), false},
		{"no meta", &memberlist.Node{Name: "x"}, false},
		{"foreign meta", &memberlist.Node{Name: "x", Meta: []byte("serf\x00tags")}, false},
		{"meta of another node", &memberlist.Node{Name: "x", Meta: mlNode(t, "y", "b").Meta}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := d.NotifyAlive(tc.node)
			if (err == nil) != tc.ok {
				t.Errorf("NotifyAlive = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestLateNoticeAfterAnnouncedShutdown: a member that announced a shutdown
// or a restart and vanishes is not reported dead while its leave notice
// may still be on its way; the notice makes it left, its return alive, its
// absence dead after the grace.
func TestLateNoticeAfterAnnouncedShutdown(t *testing.T) {
	announced := func(t *testing.T, state vocab.Announcement) *memberlist.Node {
		t.Helper()
		return mlNodeIn(t, "x", "boot-1", state)
	}
	state := func(r *Ring) vocab.MemberState {
		m, _ := r.Member("x")
		return m.State
	}
	t.Run("late notice: left, never dead", func(t *testing.T) {
		r := newViewRing(t, nil)
		d := (*delegate)(r)
		n := announced(t, vocab.AnnounceShutdownComplete)
		d.NotifyJoin(n)
		d.NotifyLeave(n)
		if s := state(r); s != vocab.MemberAlive {
			t.Fatalf("right after the leave: %s, want still alive (held back)", s)
		}
		d.NotifyMsg(EncodeLeaveNotice(LeaveNotice{Node: "x", BootID: "boot-1"}))
		if s := state(r); s != vocab.MemberLeft {
			t.Fatalf("after the late notice: %s, want left", s)
		}
		time.Sleep(leaveNoticeGrace + 200*time.Millisecond)
		if s := state(r); s != vocab.MemberLeft {
			t.Fatalf("after the grace: %s, want still left", s)
		}
	})
	t.Run("no notice: dead after the grace", func(t *testing.T) {
		r := newViewRing(t, nil)
		d := (*delegate)(r)
		n := announced(t, vocab.AnnounceShuttingDown)
		d.NotifyJoin(n)
		d.NotifyLeave(n)
		deadline := time.Now().Add(10 * time.Second)
		for state(r) != vocab.MemberDead {
			if time.Now().After(deadline) {
				t.Fatalf("still %s long after the grace", state(r))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	for _, said := range []vocab.Announcement{vocab.AnnounceShutdownComplete, vocab.AnnounceRestarting} {
		// Declared dead — a probe missed the agent while it left, under
		// load — before its leave notice or its leave came: the machine
		// back, or the agent's next run (a rollout), within the grace,
		// and fencers never see it dead.
		t.Run("announced "+string(said)+", back before the grace: alive, never dead", func(t *testing.T) {
			r := newViewRing(t, nil)
			d := (*delegate)(r)
			n := announced(t, said)
			d.NotifyJoin(n)
			d.NotifyLeave(n)
			if s := state(r); s != vocab.MemberAlive {
				t.Fatalf("right after the dead verdict: %s, want still alive (held back)", s)
			}
			d.NotifyJoin(mlNode(t, "x", "boot-2"))
			time.Sleep(leaveNoticeGrace + 200*time.Millisecond)
			if m, _ := r.Member("x"); m.State != vocab.MemberAlive || m.Meta.BootID != "boot-2" {
				t.Fatalf("x is %+v, want alive with boot-2", m)
			}
		})
	}
	t.Run("nothing announced: dead at once", func(t *testing.T) {
		r := newViewRing(t, nil)
		d := (*delegate)(r)
		n := mlNode(t, "x", "boot-1")
		d.NotifyJoin(n)
		d.NotifyLeave(n)
		if s := state(r); s != vocab.MemberDead {
			t.Fatalf("%s, want dead at once (power loss must not wait)", s)
		}
	})
}

// TestNoChangeAfterShutdown: memberlist's suspicion timers outlive its
// Shutdown; a member declared dead by one of them afterwards must not reach
// the view or OnChange (it did, and logged into finished tests).
func TestNoChangeAfterShutdown(t *testing.T) {
	r := newViewRing(t, nil)
	d := (*delegate)(r)
	d.NotifyJoin(mlNode(t, "w-1", "boot-1"))
	var changes int
	r.OnChange(func(Member) { changes++ })
	if err := r.Shutdown(); err != nil {
		t.Fatal(err)
	}
	d.NotifyLeave(mlNode(t, "w-1", "boot-1"))
	if changes != 0 {
		t.Fatalf("%d changes reported after Shutdown", changes)
	}
	if m, ok := r.Member("w-1"); !ok || m.State != vocab.MemberAlive {
		t.Fatalf("w-1 is %+v after Shutdown, want alive as it was", m)
	}
}
