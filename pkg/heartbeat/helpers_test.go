package heartbeat

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/vocab"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// Generous deadlines: the race detector and -count=3 on a small machine
// slow memberlist down a lot, and a deadline only bounds a failing test.
const (
	settle   = 20 * time.Second // for things that should happen
	quietFor = 2 * time.Second  // for things that should not (≈20 probe rounds)
)

// freePort returns a port free on 127.0.0.1 for both TCP and UDP, which
// memberlist binds together.
func freePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port on 127.0.0.1")
	return 0
}

// fastConfig is a member on 127.0.0.1 tuned for fast detection.
func fastConfig(t testing.TB, name string, port int) Config {
	t.Helper()
	if port == 0 {
		port = freePort(t)
	}
	return Config{
		NodeName:       name,
		BindAddr:       "127.0.0.1",
		BindPort:       port,
		ClusterName:    "test",
		SecretKey:      testKey,
		ProbeInterval:  100 * time.Millisecond,
		ProbeTimeout:   50 * time.Millisecond,
		SuspicionMult:  2,
		GossipInterval: 50 * time.Millisecond,
	}
}

func testMeta(boot string) Meta {
	return Meta{BootID: boot, Role: RoleObserver, Agent: "test"}
}

// newJoined builds a Ring (New) and joins it (Ring.Join) with cfg's
// advertise address: an error from either.
func newJoined(ctx context.Context, cfg Config, opts Options) (*Ring, error) {
	r, err := New(cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := r.Join(ctx, ""); err != nil {
		return nil, err
	}
	return r, nil
}

// start joins a member and shuts it down at the end of the test.
func start(t testing.TB, cfg Config, opts Options) *Ring {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t, cfg.NodeName)
	}
	if opts.Meta.BootID == "" {
		opts.Meta = testMeta("boot-" + cfg.NodeName)
	}
	r, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("new %s: %v", cfg.NodeName, err)
	}
	record(r)
	if err := r.Join(t.Context(), ""); err != nil {
		t.Fatalf("join %s: %v", cfg.NodeName, err)
	}
	t.Cleanup(func() { r.Shutdown() })
	return r
}

// changeLog keeps every change a Ring reported through OnChange, in
// order, for waitEvent and assertNeverSeen.
type changeLog struct {
	mu   sync.Mutex
	all  []Member
	next int           // waitEvent's cursor into all
	wake chan struct{} // capacity 1: "all grew"
}

// changeLogs maps each recorded *Ring to its *changeLog.
var changeLogs sync.Map

// record registers a handler on r that logs its changes; call it before
// r joins, so that no change is missed.
func record(r *Ring) *changeLog {
	l := &changeLog{wake: make(chan struct{}, 1)}
	changeLogs.Store(r, l)
	r.OnChange(func(m Member) {
		l.mu.Lock()
		l.all = append(l.all, m)
		l.mu.Unlock()
		select {
		case l.wake <- struct{}{}:
		default:
		}
	})
	return l
}

// changesOf returns the changes r reported so far.
func changesOf(t testing.TB, r *Ring) []Member {
	t.Helper()
	l, ok := changeLogs.Load(r)
	if !ok {
		t.Fatal("ring not recorded")
	}
	cl := l.(*changeLog)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return append([]Member(nil), cl.all...)
}

func seedsOf(addrs ...string) func() []string {
	return func() []string { return addrs }
}

// cluster starts members called names, all joining through the first,
// and waits until every one sees all of them alive.
func cluster(t testing.TB, names ...string) []*Ring {
	t.Helper()
	rings := make([]*Ring, len(names))
	rings[0] = start(t, fastConfig(t, names[0], 0), Options{})
	for i := 1; i < len(names); i++ {
		rings[i] = start(t, fastConfig(t, names[i], 0), Options{Seeds: seedsOf(rings[0].LocalAddr())})
	}
	for i, r := range rings {
		poll.Until(t, settle, fmt.Sprintf("%s sees %d alive", names[i], len(names)), func() bool {
			return r.Alive() == len(names)
		})
	}
	return rings
}

// waitEvent reads the changes r reported (OnChange), from where the last
// waitEvent on r stopped, until one matches, failing after timeout.
func waitEvent(t testing.TB, r *Ring, timeout time.Duration, what string, match func(Member) bool) Member {
	t.Helper()
	l, ok := changeLogs.Load(r)
	if !ok {
		t.Fatal("ring not recorded")
	}
	cl := l.(*changeLog)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		cl.mu.Lock()
		for cl.next < len(cl.all) {
			m := cl.all[cl.next]
			cl.next++
			if match(m) {
				cl.mu.Unlock()
				return m
			}
		}
		cl.mu.Unlock()
		select {
		case <-cl.wake:
		case <-r.Done():
			t.Fatalf("ring shut down while waiting for %s", what)
		case <-timer.C:
			t.Fatalf("no event within %s: %s", timeout, what)
		}
	}
}

// stateIs reports whether r sees name in state.
func stateIs(r *Ring, name string, state vocab.MemberState) func() bool {
	return func() bool {
		m, ok := r.Member(name)
		return ok && m.State == state
	}
}

// testLogger logs through t until the test ends; memberlist goroutines
// can outlive a test by a moment, and t.Log after the end panics.
func testLogger(t testing.TB, name string) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})).With("member", name)
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
