package hostile

import (
	"bytes"
	"fmt"
	"log"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/internal/testbed/ports"
)

// The ring's shared secrets, as a compromised worker would hold them.
var (
	ringKey   = []byte("0123456789abcdef0123456789abcdef")
	ringLabel = "hostile-test"
)

// Generous deadlines: the race detector on a small machine slows
// memberlist down a lot, and a deadline only bounds a failing test. A
// gossiped message lost on a loaded machine (a leave's dead message, say)
// reaches a member at the latest with the next push/pull, every 15 s in
// memberlist's local configuration: settle is well past that.
const (
	settle   = time.Minute             // for things that should happen
	quietFor = 1500 * time.Millisecond // for things that should not (≈7 probe rounds)
)

// event is one EventDelegate call.
type event struct {
	kind string // join, update, leave
	name string
	addr string
	meta string
}

// recorder is a member's Delegate, EventDelegate and AliveDelegate: it
// records everything memberlist hands it.
type recorder struct {
	name string

	mu      sync.Mutex
	events  []event
	msgs    [][]byte // NotifyMsg payloads
	alive   []string // NotifyAlive names
	merged  [][]byte // MergeRemoteState buffers
	meta    []byte
	refuse  func(*memberlist.Node) error // NotifyAlive's verdict; nil accepts
	localSt []byte
}

func (r *recorder) NodeMeta(limit int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.meta
}

func (r *recorder) NotifyMsg(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, bytes.Clone(b))
}

func (r *recorder) GetBroadcasts(overhead, limit int) [][]byte { return nil }

func (r *recorder) LocalState(join bool) []byte { return r.localSt }

func (r *recorder) MergeRemoteState(buf []byte, join bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.merged = append(r.merged, bytes.Clone(buf))
}

func (r *recorder) NotifyJoin(n *memberlist.Node)   { r.record("join", n) }
func (r *recorder) NotifyUpdate(n *memberlist.Node) { r.record("update", n) }
func (r *recorder) NotifyLeave(n *memberlist.Node)  { r.record("leave", n) }

func (r *recorder) record(kind string, n *memberlist.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{kind: kind, name: n.Name, addr: n.Address(), meta: string(n.Meta)})
}

func (r *recorder) NotifyAlive(n *memberlist.Node) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alive = append(r.alive, n.Name)
	if r.refuse != nil {
		return r.refuse(n)
	}
	return nil
}

// mark is the number of events so far, for waitEvent's since.
func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// find returns the first event from index since on that matches.
func (r *recorder) find(since int, kind, name string) (event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events[min(since, len(r.events)):] {
		if e.kind == kind && e.name == name {
			return e, true
		}
	}
	return event{}, false
}

func (r *recorder) gotMsg(p []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.msgs, func(m []byte) bool { return bytes.Equal(m, p) })
}

func (r *recorder) aliveCount(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.alive {
		if a == name {
			n++
		}
	}
	return n
}

func (r *recorder) setRefuse(f func(*memberlist.Node) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = f
}

// member is a real memberlist on 127.0.0.1.
type member struct {
	name string
	addr string // ip:port, UDP and TCP
	ml   *memberlist.Memberlist
	rec  *recorder
	tap  *tap // nil unless asked for
}

type memberOpts struct {
	key   []byte // nil: no encryption
	label string
	meta  string
	tap   bool // record what the member sends
	// reap is how long the member remembers dead members (memberlist's
	// GossipToTheDeadTime); zero keeps DefaultLocalConfig's 15 s.
	reap time.Duration
}

// startMember starts a member called name and shuts it down at the end of
// the test.
func startMember(t *testing.T, name string, o memberOpts) *member {
	t.Helper()
	rec := &recorder{name: name, meta: []byte(o.meta), localSt: []byte("local-state-of-" + name)}
	logw := &testLog{t: t, name: name}
	t.Cleanup(logw.stop) // runs after the Shutdown registered below
	logger := log.New(logw, "", 0)

	var (
		nt   *memberlist.NetTransport
		port int
		err  error
	)
	for range 10 {
		var p []int
		if p, err = ports.Free("tcp", "127.0.0.1", 1); err != nil {
			t.Fatal(err)
		}
		port = p[0]
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, BindPort: port, Logger: logger})
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("transport for %s: %v", name, err)
	}
	m := &member{name: name, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), rec: rec}

	c := memberlist.DefaultLocalConfig()
	c.Name = name
	c.BindAddr = "127.0.0.1"
	c.BindPort = port
	c.AdvertiseAddr = "127.0.0.1"
	c.AdvertisePort = port
	c.SecretKey = o.key
	c.Label = o.label
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	if o.reap > 0 {
		c.GossipToTheDeadTime = o.reap
	}
	c.Delegate = rec
	c.Events = rec
	c.Alive = rec
	c.Logger = logger
	if o.tap {
		m.tap = &tap{NetTransport: nt}
		c.Transport = m.tap
	} else {
		c.Transport = nt
	}
	ml, err := memberlist.Create(c)
	if err != nil {
		nt.Shutdown()
		t.Fatalf("memberlist %s: %v", name, err)
	}
	t.Cleanup(func() { ml.Shutdown() })
	m.ml = ml
	return m
}

// startRing starts members called names, each joining all those before
// it, and waits until each sees them all.
func startRing(t *testing.T, o memberOpts, names ...string) []*member {
	t.Helper()
	ms := make([]*member, len(names))
	for i, n := range names {
		mo := o
		mo.meta = "meta-of-" + n
		ms[i] = startMember(t, n, mo)
		// Joining every member before, not just the first, spares
		// waiting for gossip (retransmitted only a few times) or the
		// periodic push/pull (15 s) to spread the news.
		var seeds []string
		for _, m := range ms[:i] {
			seeds = append(seeds, m.addr)
		}
		if len(seeds) > 0 {
			if got, err := ms[i].ml.Join(seeds); err != nil || got != len(seeds) {
				t.Fatalf("%s joins %v: %d reached, %v", n, seeds, got, err)
			}
		}
	}
	for _, m := range ms {
		poll.Until(t, settle, m.name+" sees "+strconv.Itoa(len(names))+" members", func() bool { return m.ml.NumMembers() == len(names) })
	}
	return ms
}

// forger returns a Forger closed at the end of the test.
func forger(t *testing.T, key []byte, label string) *Forger {
	t.Helper()
	f, err := New(key, label)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// waitEvent waits for m's recorder to record kind for name at or after
// index since, and returns it.
func waitEvent(t *testing.T, m *member, since int, kind, name string) event {
	t.Helper()
	var e event
	poll.Until(t, settle, fmt.Sprintf("%s records %s of %s", m.name, kind, name), func() bool {
		var ok bool
		e, ok = m.rec.find(since, kind, name)
		return ok
	})
	return e
}

// noEvent fails if m records kind for name at or after since within
// quietFor.
func noEvent(t *testing.T, m *member, since int, kind, name string) {
	t.Helper()
	deadline := time.Now().Add(quietFor)
	for time.Now().Before(deadline) {
		if e, ok := m.rec.find(since, kind, name); ok {
			t.Fatalf("%s recorded %+v; want no %s of %s", m.name, e, kind, name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// view is m's member table, learnt by a push/pull that pushes nothing.
func view(t *testing.T, f *Forger, m *member) map[string]State {
	t.Helper()
	rep, err := f.PushPull(m.addr, PushPull{})
	if err != nil {
		t.Fatalf("push/pull with %s: %v", m.name, err)
	}
	out := make(map[string]State, len(rep.Nodes))
	for _, s := range rep.Nodes {
		out[s.Name] = s
	}
	return out
}

func hostPort(ip net.IP, port uint16) string {
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

// unusedAddr is a loopback address nothing listens on, for forged members.
func unusedAddr(t *testing.T) (net.IP, uint16) {
	t.Helper()
	p, err := ports.Free("udp", "127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	return net.IPv4(127, 0, 0, 1), uint16(p[0])
}

// testLog sends memberlist's log lines (but DEBUG) to t.Log until stop.
type testLog struct {
	mu      sync.Mutex
	t       *testing.T
	name    string
	stopped bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := strings.TrimSpace(string(p)); !l.stopped && !strings.Contains(s, "[DEBUG]") {
		l.t.Logf("%s: %s", l.name, s)
	}
	return len(p), nil
}

func (l *testLog) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
}

// tap is a NetTransport that records every packet and stream its member
// sends, as they go on the wire (label header included).
type tap struct {
	*memberlist.NetTransport

	mu      sync.Mutex
	packets [][]byte
	streams []*tapConn
}

var _ memberlist.NodeAwareTransport = (*tap)(nil)

func (t *tap) WriteTo(b []byte, addr string) (time.Time, error) {
	t.record(b)
	return t.NetTransport.WriteTo(b, addr)
}

func (t *tap) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	t.record(b)
	return t.NetTransport.WriteToAddress(b, a)
}

func (t *tap) record(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.packets = append(t.packets, bytes.Clone(b))
}

func (t *tap) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.wrap(t.NetTransport.DialTimeout(addr, timeout))
}

func (t *tap) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.wrap(t.NetTransport.DialAddressTimeout(a, timeout))
}

func (t *tap) wrap(c net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	tc := &tapConn{Conn: c}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.streams = append(t.streams, tc)
	return tc, nil
}

// sent returns copies of the packets and of each stream's bytes so far.
func (t *tap) sent() (packets, streams [][]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	packets = slices.Clone(t.packets)
	for _, s := range t.streams {
		s.mu.Lock()
		streams = append(streams, bytes.Clone(s.out))
		s.mu.Unlock()
	}
	return packets, streams
}

// tapConn records what is written to it.
type tapConn struct {
	net.Conn
	mu  sync.Mutex
	out []byte
}

func (c *tapConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.out = append(c.out, b...)
	c.mu.Unlock()
	return c.Conn.Write(b)
}
