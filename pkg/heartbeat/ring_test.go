package heartbeat

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/vocab"
)

func TestMembersJoinThroughSeedsAndSeeEachOther(t *testing.T) {
	rings := cluster(t, "a", "b", "c")
	names := []string{"a", "b", "c"}
	for i, r := range rings {
		members := r.Members()
		if got := len(members); got != 3 {
			t.Fatalf("%s lists %d members, want 3", names[i], got)
		}
		if !slices.IsSortedFunc(members, func(x, y Member) int { return strings.Compare(x.Name, y.Name) }) {
			t.Errorf("%s: members not sorted by name: %v", names[i], members)
		}
		for j, m := range members {
			want := Meta{Version: MetaVersion, Node: names[j], BootID: "boot-" + names[j], Role: RoleObserver, State: vocab.AnnounceRunning, Agent: "test", Keys: Fingerprint(testKey)}
			if m.Name != names[j] || m.State != vocab.MemberAlive || m.Meta != want {
				t.Errorf("%s sees %+v, want %s alive with %+v", names[i], m, names[j], want)
			}
			if m.Addr != rings[j].LocalAddr() {
				t.Errorf("%s sees %s at %q, it is at %q", names[i], m.Name, m.Addr, rings[j].LocalAddr())
			}
			if m.Since.IsZero() {
				t.Errorf("%s: %s has no Since", names[i], m.Name)
			}
		}
	}
	// The join was reported as events too, in whichever order a learnt of
	// them (c joins through a, and b's news may come later).
	for seen := map[string]bool{}; len(seen) < 2; {
		m := waitEvent(t, rings[0], settle, "b and c alive at a", func(m Member) bool {
			return (m.Name == "b" || m.Name == "c") && m.State == vocab.MemberAlive
		})
		seen[m.Name] = true
	}
}

func TestPeerGoneIsDeadOrLeft(t *testing.T) {
	cases := []struct {
		name  string
		stop  func(*Ring) error
		want  vocab.MemberState
		never vocab.MemberState
	}{
		{"crash is dead", (*Ring).Shutdown, vocab.MemberDead, vocab.MemberLeft},
		{"leave is left", func(r *Ring) error { return r.Leave(5 * time.Second) }, vocab.MemberLeft, vocab.MemberDead},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rings := cluster(t, "a", "b", "c")
			if err := tc.stop(rings[2]); err != nil {
				t.Fatal(err)
			}
			for _, r := range rings[:2] {
				m := waitEvent(t, r, settle, "c "+string(tc.want), func(m Member) bool {
					return m.Name == "c" && m.State != vocab.MemberAlive
				})
				if m.State != tc.want {
					t.Fatalf("c went %s, want %s", m.State, tc.want)
				}
				if m.Meta.BootID != "boot-c" {
					t.Errorf("the last Meta of c was not kept: %+v", m.Meta)
				}
			}
			// Well past the suspicion timeout, nothing has changed its mind.
			time.Sleep(quietFor)
			for _, r := range rings[:2] {
				if m, _ := r.Member("c"); m.State != tc.want {
					t.Errorf("c is %s after a while, want %s", m.State, tc.want)
				}
				if got := r.Alive(); got != 2 {
					t.Errorf("Alive() = %d, want 2", got)
				}
			}
		})
	}
}

func TestAnnounceReachesOthers(t *testing.T) {
	rings := cluster(t, "a", "b")
	a, b := rings[0], rings[1]
	if err := a.Announce("rebooting"); err == nil {
		t.Error("Announce accepted an unknown state")
	}
	for _, state := range []vocab.Announcement{vocab.AnnounceShuttingDown, vocab.AnnounceShutdownComplete} {
		if err := a.Announce(state); err != nil {
			t.Fatal(err)
		}
		m := waitEvent(t, b, settle, "a announces "+string(state), func(m Member) bool {
			return m.Name == "a" && m.Meta.State == state
		})
		if m.State != vocab.MemberAlive || m.Meta.BootID != "boot-a" {
			t.Errorf("b sees %+v after the announcement", m)
		}
		if self, _ := a.Member("a"); self.Meta.State != state {
			t.Errorf("a's own view has state %q", self.Meta.State)
		}
	}
	// The clean-shutdown path: announced complete, then left.
	if err := a.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	m := waitEvent(t, b, settle, "a left", func(m Member) bool { return m.Name == "a" && m.State != vocab.MemberAlive })
	if m.State != vocab.MemberLeft || m.Meta.State != vocab.AnnounceShutdownComplete || m.Meta.BootID != "boot-a" {
		t.Errorf("b sees %+v, want left after shutdown-complete of boot-a", m)
	}
}

func TestNonNodeIsRefused(t *testing.T) {
	isNode := func(name string) bool { return name == "a" || name == "b" }
	a := start(t, fastConfig(t, "a", 0), Options{IsNode: isNode})
	b := start(t, fastConfig(t, "b", 0), Options{IsNode: isNode, Seeds: seedsOf(a.LocalAddr())})
	poll.Until(t, settle, "a and b see each other", func() bool { return a.Alive() == 2 && b.Alive() == 2 })

	start(t, fastConfig(t, "intruder", 0), Options{Seeds: seedsOf(a.LocalAddr(), b.LocalAddr())})
	assertNeverSeen(t, "intruder", a, b)
}

func TestNoJoinAcrossKeyOrCluster(t *testing.T) {
	cases := []struct {
		name   string
		modify func(*Config)
	}{
		{"wrong key", func(c *Config) { c.SecretKey = []byte("fedcba9876543210fedcba9876543210") }},
		{"other cluster name", func(c *Config) { c.ClusterName = "other" }},
		{"no encryption", func(c *Config) { c.SecretKey, c.Insecure = nil, true }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rings := cluster(t, "a", "b")
			cfg := fastConfig(t, "x", 0)
			tc.modify(&cfg)
			x := start(t, cfg, Options{Seeds: seedsOf(rings[0].LocalAddr())})
			assertNeverSeen(t, "x", rings...)
			if got := x.Alive(); got != 1 {
				t.Errorf("x sees %d alive members, want only itself", got)
			}
		})
	}
}

// assertNeverSeen watches rings for quietFor and fails if any lists name
// or reported a change of it (OnChange).
func assertNeverSeen(t *testing.T, name string, rings ...*Ring) {
	t.Helper()
	time.Sleep(quietFor)
	for _, r := range rings {
		if m, ok := r.Member(name); ok {
			t.Errorf("%s is listed: %+v", name, m)
		}
		for _, m := range changesOf(t, r) {
			if m.Name == name {
				t.Errorf("change of %s reported: %+v", name, m)
			}
		}
	}
}

func TestRestartWithNewBootIDIsAliveAgain(t *testing.T) {
	cases := []struct {
		name     string
		waitDead bool
	}{
		{"after being declared dead", true},
		{"before anyone noticed", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rings := cluster(t, "a", "b", "c")
			cfg := fastConfig(t, "c", 0)
			cfg.BindPort = portOf(t, rings[2])
			if err := rings[2].Shutdown(); err != nil {
				t.Fatal(err)
			}
			if tc.waitDead {
				for _, r := range rings[:2] {
					poll.Until(t, settle, "c is dead", stateIs(r, "c", vocab.MemberDead))
				}
			}
			start(t, cfg, Options{Meta: testMeta("boot-c-2"), Seeds: seedsOf(rings[0].LocalAddr())})
			for _, r := range rings[:2] {
				waitEvent(t, r, settle, "c alive with its new boot ID", func(m Member) bool {
					return m.Name == "c" && m.State == vocab.MemberAlive && m.Meta.BootID == "boot-c-2"
				})
			}
		})
	}
}

func portOf(t *testing.T, r *Ring) int {
	t.Helper()
	n, err := nodeOf("", r.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	return int(n.Port)
}

func TestSeedsAreRetriedUntilFound(t *testing.T) {
	portA := freePort(t)
	var calls atomic.Int32
	seeds := func() []string {
		calls.Add(1)
		return []string{"127.0.0.1:" + strconv.Itoa(portA)}
	}
	b := start(t, fastConfig(t, "b", 0), Options{Seeds: seeds})
	if got := b.Alive(); got != 1 {
		t.Fatalf("b sees %d alive before a exists", got)
	}
	time.Sleep(300 * time.Millisecond) // a few failed attempts
	a := start(t, fastConfig(t, "a", portA), Options{})
	poll.Until(t, settle, "a and b find each other", func() bool { return a.Alive() == 2 && b.Alive() == 2 })
	if n := calls.Load(); n < 2 {
		t.Errorf("Seeds called %d times, want retries", n)
	}
}

func TestRejoinWhenAloneAgain(t *testing.T) {
	// a's only peer dies and comes back under a new boot; a must look for
	// seeds again instead of waiting for the peer to find it.
	portB := freePort(t)
	a := start(t, fastConfig(t, "a", 0), Options{Seeds: seedsOf("127.0.0.1:" + strconv.Itoa(portB))})
	b := start(t, fastConfig(t, "b", portB), Options{})
	poll.Until(t, settle, "a and b see each other", func() bool { return a.Alive() == 2 && b.Alive() == 2 })
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "a sees b dead", stateIs(a, "b", vocab.MemberDead))
	// The new b has no seeds: only a's retry can bring them together.
	b2 := start(t, fastConfig(t, "b", portB), Options{Meta: testMeta("boot-b-2")})
	poll.Until(t, settle, "a and the new b see each other", func() bool { return a.Alive() == 2 && b2.Alive() == 2 })
	if m, _ := a.Member("b"); m.Meta.BootID != "boot-b-2" {
		t.Errorf("a sees b with boot %q", m.Meta.BootID)
	}
}

func TestAfterShutdown(t *testing.T) {
	r := start(t, fastConfig(t, "a", 0), Options{})
	if err := r.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown(); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := r.Leave(time.Second); !errors.Is(err, ErrShutdown) {
		t.Errorf("Leave after Shutdown = %v, want ErrShutdown", err)
	}
	if err := r.Announce(vocab.AnnounceShutdownComplete); !errors.Is(err, ErrShutdown) {
		t.Errorf("Announce after Shutdown = %v, want ErrShutdown", err)
	}
	select {
	case <-r.Done():
	default:
		t.Error("Done not closed after Shutdown")
	}
}

func TestLeaveAlone(t *testing.T) {
	r := start(t, fastConfig(t, "a", 0), Options{})
	if err := r.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	if m, _ := r.Member("a"); m.State != vocab.MemberLeft {
		t.Errorf("own state after Leave = %s, want left", m.State)
	}
}

func TestJoinRejectsBadSettings(t *testing.T) {
	long := make([]byte, MaxMetaSize)
	for i := range long {
		long[i] = 'x'
	}
	cases := []struct {
		name string
		cfg  func(*Config)
		opts Options
	}{
		{"no key", func(c *Config) { c.SecretKey = nil }, Options{}},
		{"meta of another node", nil, Options{Meta: Meta{Node: "other"}}},
		{"unknown role", nil, Options{Meta: Meta{Role: "boss"}}},
		{"unknown state", nil, Options{Meta: Meta{State: "rebooting"}}},
		{"meta too large", nil, Options{Meta: Meta{Agent: string(long)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fastConfig(t, "a", 0)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			r, err := newJoined(t.Context(), cfg, tc.opts)
			if err == nil {
				r.Shutdown()
				t.Fatal("Join accepted it")
			}
		})
	}
}

// TestDetectionTimeLANDefaults measures, with memberlist's LAN profile
// (the package defaults), how long a 5-member ring on loopback takes from
// a member's Shutdown until every other member reports it dead.
func TestDetectionTimeLANDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("takes several seconds of real time")
	}
	names := []string{"a", "b", "c", "d", "e"}
	rings := make([]*Ring, len(names))
	for i, name := range names {
		cfg := Config{NodeName: name, BindAddr: "127.0.0.1", BindPort: freePort(t), ClusterName: "test", SecretKey: testKey}
		var opts Options
		if i > 0 {
			opts.Seeds = seedsOf(rings[0].LocalAddr())
		}
		rings[i] = start(t, cfg, opts)
	}
	for _, r := range rings {
		poll.Until(t, time.Minute, "all 5 alive", func() bool { return r.Alive() == 5 })
	}
	// Let the ring settle into its probe rhythm.
	time.Sleep(2 * time.Second)

	stopped := time.Now()
	if err := rings[4].Shutdown(); err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	for i, r := range rings[:4] {
		m := waitEvent(t, r, time.Minute, "e dead", func(m Member) bool { return m.Name == "e" && m.State == vocab.MemberDead })
		d := m.Since.Sub(stopped)
		t.Logf("%s saw e dead after %s", names[i], d.Round(10*time.Millisecond))
		slowest = max(slowest, d)
	}
	t.Logf("LAN defaults, 5 members: Shutdown → dead at all others after %s", slowest.Round(10*time.Millisecond))
}

// countingTransport counts the packets memberlist hands it.
type countingTransport struct {
	*memberlist.NetTransport
	packets atomic.Int64
}

func (c *countingTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	c.packets.Add(1)
	return c.NetTransport.WriteToAddress(b, addr)
}

func TestTransportOptionCarriesTheRing(t *testing.T) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	tr := &countingTransport{NetTransport: nt}
	a := start(t, fastConfig(t, "a", 0), Options{})
	b := start(t, fastConfig(t, "b", nt.GetAutoBindPort()), Options{Transport: tr, Seeds: seedsOf(a.LocalAddr())})
	poll.Until(t, settle, "a and b see each other", func() bool { return a.Alive() == 2 && b.Alive() == 2 })
	if b.LocalAddr() != "127.0.0.1:"+strconv.Itoa(nt.GetAutoBindPort()) {
		t.Errorf("b is at %s, its transport at port %d", b.LocalAddr(), nt.GetAutoBindPort())
	}
	poll.Until(t, settle, "b's probes go through its transport", func() bool { return tr.packets.Load() > 0 })
}
