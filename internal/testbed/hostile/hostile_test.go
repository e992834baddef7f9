package hostile

import (
	"bytes"
	"crypto/rand"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"fenced.io/fenced/internal/testbed/poll"
)

var secure = memberOpts{key: ringKey, label: ringLabel}

// A forged alive for a name the ring has never seen makes the member
// report a join with the forged metadata, and the member gossips it on:
// the other members report the join too. Incarnation 0 is the exception:
// a new name is stored at incarnation 0 (as dead) and an alive must beat
// it, so it is silently dropped.
func TestForgedAliveJoinsNewMember(t *testing.T) {
	ring := startRing(t, secure, "a", "b")
	a, b := ring[0], ring[1]
	f := forger(t, ringKey, ringLabel)
	ip, port := unusedAddr(t)

	since := a.rec.mark()
	if err := f.Alive(a.addr, Alive{Name: "ghost0", Incarnation: 0, Addr: ip, Port: port, Meta: []byte("zero")}); err != nil {
		t.Fatal(err)
	}
	noEvent(t, a, since, "join", "ghost0")

	sinceA, sinceB := a.rec.mark(), b.rec.mark()
	if err := f.Alive(a.addr, Alive{Name: "ghost", Incarnation: 1, Addr: ip, Port: port, Meta: []byte("forged-meta")}); err != nil {
		t.Fatal(err)
	}
	e := waitEvent(t, a, sinceA, "join", "ghost")
	if e.meta != "forged-meta" || e.addr != hostPort(ip, port) {
		t.Errorf("a's join of ghost = %+v; want meta forged-meta at %s", e, hostPort(ip, port))
	}
	if e := waitEvent(t, b, sinceB, "join", "ghost"); e.meta != "forged-meta" {
		t.Errorf("b's join of ghost (gossiped by a) = %+v; want meta forged-meta", e)
	}
	if a.rec.aliveCount("ghost") == 0 {
		t.Error("a's AliveDelegate was not consulted for the forged alive")
	}
}

// A forged alive for an existing member, with a higher incarnation and new
// metadata, makes the member report an update with the forged metadata.
// One at the current incarnation is ignored. The impersonated member
// hears of it through gossip and refutes it, so the forgery lasts until
// its refutation arrives.
func TestForgedAliveUpdatesMember(t *testing.T) {
	a := startRing(t, secure, "a", "b")[0]
	f := forger(t, ringKey, ringLabel)
	cur := view(t, f, a)["b"]
	if cur.State != memberlist.StateAlive || cur.Incarnation == 0 {
		t.Fatalf("a's view of b = %+v; want alive at incarnation > 0", cur)
	}

	since := a.rec.mark()
	stale := Alive{Name: "b", Incarnation: cur.Incarnation, Addr: cur.Addr, Port: cur.Port, Meta: []byte("stale")}
	fresh := stale
	fresh.Incarnation, fresh.Meta = cur.Incarnation+1, []byte("forged-meta")
	if err := f.Alive(a.addr, stale); err != nil {
		t.Fatal(err)
	}
	if err := f.Alive(a.addr, fresh); err != nil {
		t.Fatal(err)
	}
	e := waitEvent(t, a, since, "update", "b")
	if e.meta != "forged-meta" {
		t.Errorf("a's first update of b = %+v; want meta forged-meta (the stale alive must be ignored)", e)
	}
	// b refutes: a sees b's own metadata again, at a higher incarnation.
	poll.Until(t, settle, "a sees b's refutation", func() bool {
		s := view(t, f, a)["b"]
		return string(s.Meta) == "meta-of-b" && s.Incarnation > fresh.Incarnation
	})
}

// A forged dead for a live third member, at its current incarnation or
// higher, makes the member report it left; the From field is not checked
// (any name, even one that is no member, will do), while a lower
// incarnation and an unknown name are ignored. The victim hears of it
// through gossip and refutes, so it comes back.
func TestForgedDeadKillsThirdMember(t *testing.T) {
	ring := startRing(t, secure, "a", "b")
	a := ring[0]
	f := forger(t, ringKey, ringLabel)
	cur := view(t, f, a)["b"]
	if cur.Incarnation == 0 {
		t.Fatalf("a's view of b = %+v; want incarnation > 0", cur)
	}

	since := a.rec.mark()
	if err := f.Dead(a.addr, "b", cur.Incarnation-1, "nobody"); err != nil {
		t.Fatal(err)
	}
	if err := f.Dead(a.addr, "never-seen", 7, "nobody"); err != nil {
		t.Fatal(err)
	}
	noEvent(t, a, since, "leave", "b")
	if _, ok := view(t, f, a)["never-seen"]; ok {
		t.Error("a recorded a member it only heard was dead")
	}

	if err := f.Dead(a.addr, "b", cur.Incarnation, "nobody"); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, since, "leave", "b")
	waitEvent(t, a, since, "join", "b") // b's refutation
	if s := view(t, f, a)["b"]; s.State != memberlist.StateAlive || s.Incarnation <= cur.Incarnation {
		t.Errorf("a's view of b after the refutation = %+v; want alive above incarnation %d", s, cur.Incarnation)
	}
}

// A forged dead from the member itself (From == Node) is a graceful
// leave: the member records it as left. At incarnation MaxUint32 the
// victim cannot refute it: its refutation must beat the accusation, and
// memberlist's uint32 incarnation wraps to 0, which the others ignore. The
// victim stays out of their view for good, while it still sees them: not
// even its explicit rejoin after the member forgot it brings it back, as
// its incarnation is stuck at 0, and a new name needs 1.
func TestForgedLeaveAtMaxIncarnationIsUnrefutable(t *testing.T) {
	o := secure
	o.reap = 2 * time.Second
	ring := startRing(t, o, "a", "b")
	a, b := ring[0], ring[1]
	f := forger(t, ringKey, ringLabel)

	since := a.rec.mark()
	if err := f.Dead(a.addr, "b", math.MaxUint32, "b"); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, since, "leave", "b")
	if s := view(t, f, a)["b"]; s.State != memberlist.StateLeft || s.Incarnation != math.MaxUint32 {
		t.Errorf("a's view of b = %+v; want left at incarnation MaxUint32", s)
	}
	noEvent(t, a, since, "join", "b")
	if s := view(t, f, b)["b"]; s.State != memberlist.StateAlive || s.Incarnation != 0 {
		t.Errorf("b's view of itself = %+v; want alive at incarnation 0 (wrapped around)", s)
	}
	if b.ml.NumMembers() != 2 || a.ml.NumMembers() != 1 {
		t.Errorf("a sees %d members and b %d; want a alone and b with both", a.ml.NumMembers(), b.ml.NumMembers())
	}

	poll.Until(t, settle, "a forgets b", func() bool { _, ok := view(t, f, a)["b"]; return !ok })
	if _, err := b.ml.Join([]string{a.addr}); err != nil {
		t.Fatalf("b rejoins a: %v", err)
	}
	noEvent(t, a, since, "join", "b")
}

// A forged suspect for a live third member at its current incarnation is
// accepted: the member marks it suspect and gossips the suspicion, which
// reaches the victim, which refutes at a higher incarnation.
func TestForgedSuspectIsAccepted(t *testing.T) {
	ring := startRing(t, secure, "a", "b")
	a := ring[0]
	f := forger(t, ringKey, ringLabel)
	cur := view(t, f, a)["b"]

	if err := f.Suspect(a.addr, "b", cur.Incarnation, "nobody"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "b refutes the suspicion a gossiped", func() bool {
		s := view(t, f, a)["b"]
		return s.State == memberlist.StateAlive && s.Incarnation > cur.Incarnation
	})
}

// A forged suspect at incarnation MaxUint32 cannot be refuted (see
// TestForgedLeaveAtMaxIncarnationIsUnrefutable): the member keeps the
// victim suspect, then declares it dead when its suspicion timer runs out,
// with nobody but the Forger having accused it.
func TestForgedSuspectAtMaxIncarnationKills(t *testing.T) {
	ring := startRing(t, secure, "a", "b")
	a := ring[0]
	f := forger(t, ringKey, ringLabel)

	since := a.rec.mark()
	if err := f.Suspect(a.addr, "b", math.MaxUint32, "nobody"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "a holds b suspect", func() bool { return view(t, f, a)["b"].State == memberlist.StateSuspect })
	waitEvent(t, a, since, "leave", "b")
	if s := view(t, f, a)["b"]; s.State != memberlist.StateDead {
		t.Errorf("a's view of b = %+v; want dead", s)
	}
	noEvent(t, a, since, "join", "b")
}

// User messages forged over UDP and over a TCP stream reach the Delegate's
// NotifyMsg byte for byte: any bytes, the TCP one larger than a packet.
func TestForgedUserMessages(t *testing.T) {
	a := startMember(t, "a", secure)
	f := forger(t, ringKey, ringLabel)

	udp := make([]byte, 1200)
	rand.Read(udp)
	udp[0] = 244 // looks like a label header, must not matter inside
	tcp := make([]byte, 300_000)
	rand.Read(tcp)
	if err := f.UserUDP(a.addr, udp); err != nil {
		t.Fatal(err)
	}
	if err := f.UserTCP(a.addr, tcp); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "a's delegate gets the UDP payload", func() bool { return a.rec.gotMsg(udp) })
	poll.Until(t, settle, "a's delegate gets the TCP payload", func() bool { return a.rec.gotMsg(tcp) })
}

// Several forged messages fit in one compound packet, compressed as a
// member with EnableCompression sends them; compression applies to
// streams too.
func TestForgedCompoundCompressed(t *testing.T) {
	a := startMember(t, "a", secure)
	f := forger(t, ringKey, ringLabel)
	f.Compress = true
	ip, port := unusedAddr(t)

	since := a.rec.mark()
	one, two := []byte(strings.Repeat("one ", 100)), []byte(strings.Repeat("two ", 100))
	if err := f.Send(a.addr, UserMsg(one), AliveMsg(Alive{Name: "ghost", Incarnation: 1, Addr: ip, Port: port, Meta: []byte("m")}), UserMsg(two)); err != nil {
		t.Fatal(err)
	}
	tcp := []byte(strings.Repeat("three ", 1000))
	if err := f.UserTCP(a.addr, tcp); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, since, "join", "ghost")
	poll.Until(t, settle, "a gets all three user messages", func() bool {
		return a.rec.gotMsg(one) && a.rec.gotMsg(two) && a.rec.gotMsg(tcp)
	})
}

// A forged push/pull returns the member's whole table (incarnations
// included) and its Delegate's LocalState, and the member merges the
// pushed states and user state: a forged alive state joins a new member.
func TestForgedPushPull(t *testing.T) {
	ring := startRing(t, secure, "a", "b")
	a := ring[0]
	f := forger(t, ringKey, ringLabel)
	ip, port := unusedAddr(t)

	since := a.rec.mark()
	rep, err := f.PushPull(a.addr, PushPull{
		Nodes:     []State{{Name: "ghost", Addr: ip, Port: port, Meta: []byte("pushed-meta"), Incarnation: 1, State: memberlist.StateAlive}},
		UserState: []byte("forged-user-state"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(rep.UserState) != "local-state-of-a" {
		t.Errorf("reply user state = %q; want a's LocalState", rep.UserState)
	}
	got := map[string]State{}
	for _, s := range rep.Nodes {
		got[s.Name] = s
	}
	for _, n := range ring {
		s, ok := got[n.name]
		if !ok || s.State != memberlist.StateAlive || s.Incarnation == 0 || string(s.Meta) != "meta-of-"+n.name ||
			hostPort(s.Addr, s.Port) != n.addr || !bytes.Equal(s.Vsn, defaultVsn) {
			t.Errorf("reply's state of %s = %+v", n.name, s)
		}
	}
	if e := waitEvent(t, a, since, "join", "ghost"); e.meta != "pushed-meta" {
		t.Errorf("a's join of ghost = %+v; want meta pushed-meta", e)
	}
	a.rec.mu.Lock()
	merged := bytes.Join(a.rec.merged, []byte("|"))
	a.rec.mu.Unlock()
	if !bytes.Contains(merged, []byte("forged-user-state")) {
		t.Errorf("a's MergeRemoteState got %q; want the forged user state", merged)
	}
}

// The AliveDelegate is consulted for every forged alive that carries the
// six versions, before memberlist looks at the incarnation (so also for
// stale ones), and its refusal drops the message. With an AliveDelegate
// set, an alive with fewer versions is dropped unseen. Suspect and dead
// messages never reach it.
func TestAliveDelegateSeesForgedAlives(t *testing.T) {
	ring := startRing(t, secure, "a", "b")
	a := ring[0]
	f := forger(t, ringKey, ringLabel)
	ip, port := unusedAddr(t)
	a.rec.setRefuse(func(n *memberlist.Node) error {
		if strings.HasPrefix(n.Name, "refused") {
			return errors.New("refused by the test")
		}
		return nil
	})

	since := a.rec.mark()
	if err := f.Alive(a.addr, Alive{Name: "refused", Incarnation: 1, Addr: ip, Port: port}); err != nil {
		t.Fatal(err)
	}
	if err := f.Alive(a.addr, Alive{Name: "short", Incarnation: 1, Addr: ip, Port: port, Vsn: []uint8{1, 5, 2}}); err != nil {
		t.Fatal(err)
	}
	cur := view(t, f, a)["b"]
	before := a.rec.aliveCount("b")
	if err := f.Alive(a.addr, Alive{Name: "b", Incarnation: cur.Incarnation, Addr: cur.Addr, Port: cur.Port, Meta: cur.Meta}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "a's AliveDelegate sees refused and the stale alive of b", func() bool {
		return a.rec.aliveCount("refused") > 0 && a.rec.aliveCount("b") > before
	})
	noEvent(t, a, since, "join", "refused")
	if n := a.rec.aliveCount("short"); n != 0 {
		t.Errorf("a's AliveDelegate saw the alive without versions %d times", n)
	}
	if _, ok := view(t, f, a)["short"]; ok {
		t.Error("a recorded the alive without versions")
	}

	// Dead bypasses the AliveDelegate, whatever it would say about b.
	a.rec.setRefuse(func(n *memberlist.Node) error {
		if n.Name == "b" {
			return errors.New("refused by the test")
		}
		return nil
	})
	before = a.rec.aliveCount("b")
	if err := f.Dead(a.addr, "b", cur.Incarnation, "nobody"); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, since, "leave", "b")
	// b's refutation now meets the refusing AliveDelegate: b stays dead.
	poll.Until(t, settle, "a's AliveDelegate is asked about b's refutation", func() bool { return a.rec.aliveCount("b") > before })
	noEvent(t, a, since, "join", "b")
}

// A Forger without the ring's key or label is ignored: its alive, user
// messages and push/pull get nowhere, while the same from a Forger with
// both gets through.
func TestWrongKeyOrLabelIgnored(t *testing.T) {
	a := startMember(t, "a", secure)
	otherKey := bytes.Repeat([]byte{7}, 32)
	bad := map[string]*Forger{
		"wrong-key":   forger(t, otherKey, ringLabel),
		"short-key":   forger(t, ringKey[:16], ringLabel),
		"wrong-label": forger(t, ringKey, "other-cluster"),
		"no-label":    forger(t, ringKey, ""),
		"no-key":      forger(t, nil, ringLabel),
	}
	ip, port := unusedAddr(t)
	since := a.rec.mark()
	for name, f := range bad {
		if err := f.Alive(a.addr, Alive{Name: name, Incarnation: 1, Addr: ip, Port: port}); err != nil {
			t.Fatal(err)
		}
		if err := f.UserUDP(a.addr, []byte(name+"-udp")); err != nil {
			t.Fatal(err)
		}
		if err := f.UserTCP(a.addr, []byte(name+"-tcp")); err != nil {
			t.Fatal(err)
		}
		if _, err := f.PushPull(a.addr, PushPull{Nodes: []State{{Name: name + "-pushed", Addr: ip, Port: port, Incarnation: 1}}}); err == nil {
			t.Errorf("%s: push/pull succeeded", name)
		} else {
			t.Logf("%s: push/pull: %v", name, err)
		}
	}
	// The canary: the same from the right Forger arrives.
	good := forger(t, ringKey, ringLabel)
	if err := good.Alive(a.addr, Alive{Name: "canary", Incarnation: 1, Addr: ip, Port: port}); err != nil {
		t.Fatal(err)
	}
	if err := good.UserUDP(a.addr, []byte("canary-udp")); err != nil {
		t.Fatal(err)
	}
	if err := good.UserTCP(a.addr, []byte("canary-tcp")); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, a, since, "join", "canary")
	poll.Until(t, settle, "a gets the canary's user messages", func() bool {
		return a.rec.gotMsg([]byte("canary-udp")) && a.rec.gotMsg([]byte("canary-tcp"))
	})
	time.Sleep(quietFor)
	for name := range bad {
		for _, n := range []string{name, name + "-pushed"} {
			if e, ok := a.rec.find(since, "join", n); ok {
				t.Errorf("a recorded %+v", e)
			}
		}
		for _, p := range []string{name + "-udp", name + "-tcp"} {
			if a.rec.gotMsg([]byte(p)) {
				t.Errorf("a's delegate got %q", p)
			}
		}
		if n := a.rec.aliveCount(name); n != 0 {
			t.Errorf("a's AliveDelegate saw %s", name)
		}
	}
}

// On a ring without encryption a Forger without a key forges everything
// (and one with a key is not understood).
func TestUnencryptedRing(t *testing.T) {
	for _, label := range []string{ringLabel, ""} {
		t.Run("label="+label, func(t *testing.T) {
			a := startRing(t, memberOpts{label: label}, "a", "b")[0]
			f := forger(t, nil, label)
			keyed := forger(t, ringKey, label)
			ip, port := unusedAddr(t)

			since := a.rec.mark()
			if err := keyed.Alive(a.addr, Alive{Name: "keyed", Incarnation: 1, Addr: ip, Port: port}); err != nil {
				t.Fatal(err)
			}
			if _, err := keyed.PushPull(a.addr, PushPull{}); err == nil {
				t.Error("keyed push/pull with an unencrypted member succeeded")
			}
			if err := f.Alive(a.addr, Alive{Name: "ghost", Incarnation: 1, Addr: ip, Port: port, Meta: []byte("plain")}); err != nil {
				t.Fatal(err)
			}
			if e := waitEvent(t, a, since, "join", "ghost"); e.meta != "plain" {
				t.Errorf("a's join of ghost = %+v", e)
			}
			if err := f.UserUDP(a.addr, []byte("plain-udp")); err != nil {
				t.Fatal(err)
			}
			if err := f.UserTCP(a.addr, []byte("plain-tcp")); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, settle, "a gets both user messages", func() bool {
				return a.rec.gotMsg([]byte("plain-udp")) && a.rec.gotMsg([]byte("plain-tcp"))
			})
			cur := view(t, f, a)["b"]
			if err := f.Dead(a.addr, "b", cur.Incarnation, "nobody"); err != nil {
				t.Fatal(err)
			}
			waitEvent(t, a, since, "leave", "b")
			if _, ok := a.rec.find(since, "join", "keyed"); ok {
				t.Error("a understood a keyed alive")
			}
		})
	}
}

// New refuses what memberlist itself would not accept, and Forgers refuse
// targets that are not loopback addresses.
func TestNewAndTargetChecks(t *testing.T) {
	if _, err := New([]byte("short"), ringLabel); err == nil {
		t.Error("New accepted a 5-byte key")
	}
	if _, err := New(ringKey, strings.Repeat("x", 256)); err == nil {
		t.Error("New accepted a 256-byte label")
	}
	f := forger(t, ringKey, ringLabel)
	for _, to := range []string{"10.0.0.1:7946", "192.0.2.1:7946", "localhost:7946", "127.0.0.1"} {
		if err := f.UserUDP(to, []byte("x")); err == nil {
			t.Errorf("UserUDP to %s succeeded", to)
		}
		if err := f.UserTCP(to, []byte("x")); err == nil {
			t.Errorf("UserTCP to %s succeeded", to)
		}
	}
}
