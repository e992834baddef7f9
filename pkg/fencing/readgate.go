package fencing

import (
	"context"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"fenced.io/fenced/pkg/fencing/core"
)

// readClass orders the reads waiting at the gate.
type readClass int

const (
	// readGossipOnly: only gossip suspects the node; Kubernetes still sees
	// it Ready. Any holder of the gossip key can make such suspects, as
	// many as it likes.
	readGossipOnly readClass = iota
	// readPriority: Kubernetes itself sees the node NotReady or Unknown,
	// which no gossip packet can forge.
	readPriority
)

func (c readClass) String() string {
	if c == readPriority {
		return "priority"
	}
	return "gossip-only"
}

// readClassOf classifies a read of node name by what the API (the Node
// informer) says of it now. A node without a Node object is no priority:
// nothing but gossip can have made it suspect.
func (f *Fencer) readClassOf(name string) readClass {
	n, err := f.nodes.Get(name)
	if err != nil {
		return readGossipOnly
	}
	if ready, _ := readyCondition(n); ready == core.ReadyTrue {
		return readGossipOnly
	}
	return readPriority
}

// readGate bounds the power reads a fencer has in flight at once
// (fencer.maxConcurrentPowerReads). A rack that loses power makes forty
// nodes suspect in the same second; without a bound each would open its
// BMC session — or start its fence agent, a process of tens of MB — at
// once. Reads beyond the bound wait their turn, and a dark BMC holds one
// slot for its timeout, never more.
//
// Waiting reads are served by class, then in the order they came: a read
// of a node Kubernetes sees NotReady goes before every waiting
// gossip-only one. Forged gossip suspects (or a false gossip death of many
// members) would otherwise fill the queue with slow BMCs of running nodes
// and hold a real fence behind them; gossip-only reads still run whenever
// no priority read waits.
//
// Only status reads pass the gate. Power actions are few by policy
// (maxConcurrentPowerActions, under a Lease) and must not queue behind
// the reads of a dark rack.
type readGate struct {
	mu       sync.Mutex
	limit    int
	held     int
	queues   [2][]chan struct{} // by readClass; a closed channel is a granted slot
	inFlight prometheus.Gauge
	waiting  prometheus.Gauge
}

func newReadGate(limit int, m *Metrics) *readGate {
	if limit < 1 {
		limit = 1
	}
	return &readGate{limit: limit, inFlight: m.PowerReadsInFlight, waiting: m.PowerReadsWaiting}
}

// acquire waits for a slot; false when ctx ended first (nothing to
// release then).
func (g *readGate) acquire(ctx context.Context, class readClass) bool {
	g.mu.Lock()
	if g.held < g.limit {
		g.held++
		g.mu.Unlock()
		g.inFlight.Inc()
		return true
	}
	granted := make(chan struct{})
	g.queues[class] = append(g.queues[class], granted)
	g.mu.Unlock()
	g.waiting.Inc()
	defer g.waiting.Dec()
	select {
	case <-granted:
		g.inFlight.Inc()
		return true
	case <-ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(g.queues[class], granted); i >= 0 {
		g.queues[class] = slices.Delete(g.queues[class], i, i+1)
		g.mu.Unlock()
		return false
	}
	g.mu.Unlock()
	// Granted as ctx ended: pass the slot on.
	g.inFlight.Inc()
	g.release()
	return false
}

// release gives back a slot taken by acquire: to the first waiting
// priority read, else to the first waiting gossip-only one.
func (g *readGate) release() {
	g.inFlight.Dec()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range []readClass{readPriority, readGossipOnly} {
		if q := g.queues[c]; len(q) > 0 {
			g.queues[c] = q[1:]
			close(q[0]) // the slot passes on: held is unchanged
			return
		}
	}
	g.held--
}
