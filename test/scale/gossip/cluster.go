// Package gossip measures the gossip ring at scale (`make bench-gossip`):
// rings of many members of the real pkg/heartbeat Ring (encrypted,
// labelled, with signed metadata) in one process on 127.0.0.1, their
// detection of crashed members, their false "dead" reports at rest, with
// packet loss and under CPU starvation, and their traffic and cost.
//
// One process hosts every member, so every figure of CPU and memory is
// the process's divided by the members, and a member's timers compete
// with all the others' for the machine's cores: where the process runs
// out of CPU, the figures are the machine's, not the protocol's. The
// report says how busy the process and Go's scheduler were.
package gossip

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/vocab"

	"github.com/hashicorp/memberlist"
)

// key is the ring's shared gossip key: the benchmark pays for AES-GCM as
// agents do.
var key = []byte("fenced-bench-gossip-key-32-bytes")

// Cluster is a ring of members in this process.
type Cluster struct {
	timings config.GossipTimings
	// dilation stretches every memberlist timer of every member (1: none;
	// see Options.Dilation).
	dilation float64
	traffic  *Traffic
	log      *slog.Logger

	mu      sync.Mutex
	live    map[string]*member // members not killed
	next    int                // the number in the next member's name
	watcher *watcher
}

type member struct {
	name string
	ring *heartbeat.Ring
	addr string
}

// NewCluster returns an empty ring with the given timings, each of
// memberlist's timers stretched by dilation (>= 1). Add members with Grow.
func NewCluster(timings config.GossipTimings, dilation float64) *Cluster {
	return &Cluster{
		timings:  timings,
		dilation: max(1, dilation),
		traffic:  &Traffic{},
		log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		live:     make(map[string]*member),
		watcher:  newWatcher(),
	}
}

// Traffic is the ring's traffic counter and loss knob.
func (c *Cluster) Traffic() *Traffic { return c.traffic }

// Size is the number of members not killed.
func (c *Cluster) Size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.live)
}

// Grow adds n members, at most parallel joining at once, each joining
// through up to three members already in.
func (c *Cluster) Grow(ctx context.Context, n, parallel int) error {
	sem := make(chan struct{}, parallel)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- c.add(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// add starts one member and joins it to the ring.
func (c *Cluster) add(ctx context.Context) error {
	c.mu.Lock()
	name := fmt.Sprintf("m-%05d", c.next)
	c.next++
	seeds := c.seedsLocked(3)
	c.mu.Unlock()

	tr, port, err := newTransport(c.traffic)
	if err != nil {
		return err
	}
	k, err := identity.NewKey()
	if err != nil {
		return err
	}
	cfg := heartbeat.Config{
		NodeName: name, BindAddr: "127.0.0.1", BindPort: port, ClusterName: "bench", SecretKey: key,
		ProbeInterval: c.stretch(c.timings.ProbeInterval), ProbeTimeout: c.stretch(c.timings.ProbeTimeout),
		SuspicionMult: c.timings.SuspicionMult, GossipInterval: c.stretch(c.timings.GossipInterval),
	}
	opts := heartbeat.Options{
		Meta:      heartbeat.Meta{BootID: "boot-" + name, Role: heartbeat.RoleObserver, Agent: "bench-gossip"},
		Logger:    c.log,
		Key:       k,
		Transport: tr,
	}
	if c.dilation > 1 {
		// The timers Config does not set: push/pull (the O(N) state
		// exchange, the costliest message), gossip to the dead, and the
		// TCP deadline of streams and of the fallback ping.
		opts.Memberlist = func(mc *memberlist.Config) {
			mc.PushPullInterval = c.stretch(mc.PushPullInterval)
			mc.GossipToTheDeadTime = c.stretch(mc.GossipToTheDeadTime)
			mc.TCPTimeout = c.stretch(mc.TCPTimeout)
		}
	}
	if len(seeds) > 0 {
		opts.Seeds = func() []string { return seeds }
	}
	r, err := heartbeat.New(cfg, opts)
	if err != nil {
		tr.Shutdown()
		return err
	}
	r.OnChange(c.watcher.observe(name))
	if err := r.Join(ctx, ""); err != nil {
		tr.Shutdown()
		return fmt.Errorf("join %s: %w", name, err)
	}
	c.mu.Lock()
	c.live[name] = &member{name: name, ring: r, addr: r.LocalAddr()}
	c.mu.Unlock()
	return nil
}

// seedsLocked returns the addresses of up to n random live members.
func (c *Cluster) seedsLocked(n int) []string {
	var addrs []string
	for _, m := range c.live { // map order is random enough
		if len(addrs) == n {
			break
		}
		addrs = append(addrs, m.addr)
	}
	return addrs
}

// Converged reports how many live members see every live member alive.
func (c *Cluster) Converged() (ok, of int) {
	c.mu.Lock()
	rings := make([]*heartbeat.Ring, 0, len(c.live))
	for _, m := range c.live {
		rings = append(rings, m.ring)
	}
	c.mu.Unlock()
	for _, r := range rings {
		if r.Alive() == len(rings) {
			ok++
		}
	}
	return ok, len(rings)
}

// Laggards describes up to n live members that do not see every live
// member alive: how many they see, and what they think of those they miss.
func (c *Cluster) Laggards(n int) string {
	c.mu.Lock()
	live := make(map[string]*member, len(c.live))
	maps.Copy(live, c.live)
	c.mu.Unlock()
	names := slices.Sorted(maps.Keys(live))
	var out []string
	for _, name := range names {
		if len(out) == n {
			break
		}
		r := live[name].ring
		if r.Alive() == len(live) {
			continue
		}
		var missing []string
		for _, other := range names {
			m, known := r.Member(other)
			switch {
			case !known:
				missing = append(missing, other+" unknown")
			case m.State != vocab.MemberAlive:
				missing = append(missing, fmt.Sprintf("%s %s for %s", other, m.State, time.Since(m.Since).Round(time.Second)))
			}
		}
		if len(missing) > 3 {
			missing = append(missing[:3], fmt.Sprintf("%d more", len(missing)-3))
		}
		out = append(out, fmt.Sprintf("%s sees %d alive, misses %s", name, r.Alive(), strings.Join(missing, ", ")))
	}
	return strings.Join(out, "; ")
}

// ReplaceLaggards makes the members that do not see every live member
// alive leave the ring (gracefully, and not counted as false dead
// reports), and starts as many new ones, which learn the whole ring in
// their join's push/pull. It does so only when they are at most limit, and
// returns how many it replaced.
//
// Why: after a burst of joins a member may miss a newcomer's alive
// gossip; memberlist's periodic push/pull repairs that, but only every
// 30 s × (⌈log2(N/32)⌉ + 1) — minutes for a dilated ring of hundreds,
// per batch. The forming of the ring is not what is measured.
func (c *Cluster) ReplaceLaggards(ctx context.Context, limit int) (int, error) {
	c.mu.Lock()
	var laggards []*member
	for _, m := range c.live {
		if m.ring.Alive() != len(c.live) {
			laggards = append(laggards, m)
		}
	}
	if len(laggards) == 0 || len(laggards) > limit {
		c.mu.Unlock()
		return 0, nil
	}
	for _, m := range laggards {
		delete(c.live, m.name)
	}
	c.mu.Unlock()
	for _, m := range laggards {
		c.watcher.killing(m.name)
		_ = m.ring.Leave(c.stretch(time.Second))
		_ = m.ring.Shutdown()
	}
	return len(laggards), c.Grow(ctx, len(laggards), 1)
}

// WaitConverged waits until every live member sees every live member
// alive, calling progress every few seconds.
func (c *Cluster) WaitConverged(ctx context.Context, timeout time.Duration, progress func(ok, of int)) error {
	deadline := time.Now().Add(timeout)
	last := time.Now()
	for {
		ok, of := c.Converged()
		if ok == of {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s only %d of %d members see all %d alive", timeout, ok, of, of)
		}
		if time.Since(last) > 5*time.Second {
			progress(ok, of)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Close shuts every member down.
func (c *Cluster) Close() {
	c.mu.Lock()
	live := c.live
	c.live = map[string]*member{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range live {
		wg.Go(func() { m.ring.Shutdown() })
	}
	wg.Wait()
}

// Detection is how long after a member's crash the first and the last
// of the members alive then saw it dead.
type Detection struct {
	First, Last time.Duration
	// Missed counts the members that had not seen it dead when the wait
	// ended (Last is then the wait).
	Missed int
}

// Kill crashes n random members at once, spaced by spacing (shut down
// without leaving, as a power loss), and waits up to timeout until every
// other live member has seen each of them dead.
func (c *Cluster) Kill(ctx context.Context, n int, spacing, timeout time.Duration) ([]Detection, error) {
	c.mu.Lock()
	names := make([]string, 0, len(c.live))
	for name := range c.live {
		names = append(names, name)
	}
	c.mu.Unlock()
	rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	if n >= len(names) {
		return nil, fmt.Errorf("cannot kill %d of %d members", n, len(names))
	}
	victims, observers := names[:n], names[n:]
	kills := make([]*kill, n)
	for i, v := range victims {
		if i > 0 {
			time.Sleep(spacing)
		}
		c.mu.Lock()
		m := c.live[v]
		delete(c.live, v)
		c.mu.Unlock()
		kills[i] = c.watcher.killing(v)
		m.ring.Shutdown()
	}
	deadline := time.Now().Add(timeout)
	for {
		done := true
		for _, k := range kills {
			if c.watcher.seenBy(k, observers) < len(observers) {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	out := make([]Detection, n)
	for i, k := range kills {
		out[i] = c.watcher.detection(k, observers, timeout)
	}
	return out, nil
}

// FalseDead returns how many times so far a member saw a member dead that
// had not been killed, and how many distinct members were seen so.
func (c *Cluster) FalseDead() (reports, subjects int) { return c.watcher.falseDead() }

// watcher follows every member's view through OnChange.
type watcher struct {
	mu       sync.Mutex
	deadSeen map[string]map[string]bool // observer → members it sees not alive
	killed   map[string]*kill
	falses   int
	falsed   map[string]bool
}

type kill struct {
	name string
	at   time.Time
	seen map[string]time.Time // observer → when it saw the member dead
}

func newWatcher() *watcher {
	return &watcher{deadSeen: map[string]map[string]bool{}, killed: map[string]*kill{}, falsed: map[string]bool{}}
}

// observe is the OnChange handler of member observer. It runs under
// memberlist's lock: it only records.
func (w *watcher) observe(observer string) func(heartbeat.Member) {
	return func(m heartbeat.Member) {
		if m.Name == observer {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		set := w.deadSeen[observer]
		if set == nil {
			set = map[string]bool{}
			w.deadSeen[observer] = set
		}
		if m.State == vocab.MemberAlive {
			delete(set, m.Name)
			return
		}
		if set[m.Name] {
			return // a change of a member already seen dead
		}
		set[m.Name] = true
		if k := w.killed[m.Name]; k != nil {
			if _, ok := k.seen[observer]; !ok {
				k.seen[observer] = now
			}
			return
		}
		w.falses++
		w.falsed[m.Name] = true
	}
}

// killing records that name is about to be crashed.
func (w *watcher) killing(name string) *kill {
	k := &kill{name: name, at: time.Now(), seen: map[string]time.Time{}}
	w.mu.Lock()
	w.killed[name] = k
	w.mu.Unlock()
	return k
}

func (w *watcher) seenBy(k *kill, observers []string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, o := range observers {
		if _, ok := k.seen[o]; ok {
			n++
		}
	}
	return n
}

func (w *watcher) detection(k *kill, observers []string, wait time.Duration) Detection {
	w.mu.Lock()
	defer w.mu.Unlock()
	var times []time.Duration
	for _, o := range observers {
		if at, ok := k.seen[o]; ok {
			times = append(times, at.Sub(k.at))
		}
	}
	d := Detection{Missed: len(observers) - len(times), Last: wait}
	if len(times) > 0 {
		d.First = slices.Min(times)
		if d.Missed == 0 {
			d.Last = slices.Max(times)
		}
	} else {
		d.First = wait
	}
	return d
}

func (w *watcher) falseDead() (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.falses, len(w.falsed)
}

// stretch turns a duration of the protocol's time into the wall time the
// dilated ring takes for it.
func (c *Cluster) stretch(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.dilation)
}

// shrink turns a wall time measured on the dilated ring into the
// protocol's time.
func (c *Cluster) shrink(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.dilation)
}
