package fencer

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// readGate bounds the power reads a fencer has in flight at once
// (fencer.maxConcurrentPowerReads). A rack that loses power makes forty
// nodes suspect in the same second; without a bound each would open its
// BMC session — or start its fence agent, a process of tens of MB — at
// once. Reads beyond the bound wait their turn: a buffered channel's
// blocked senders are woken in the order they came, so no read is lost
// or overtaken, and a dark BMC holds one slot for its timeout, never more.
//
// Only status reads pass the gate. Power actions are few by policy
// (maxConcurrentPowerActions, under a Lease) and must not queue behind
// the reads of a dark rack.
type readGate struct {
	slots    chan struct{}
	inFlight prometheus.Gauge
	waiting  prometheus.Gauge
}

func newReadGate(limit int, m *Metrics) *readGate {
	if limit < 1 {
		limit = 1
	}
	return &readGate{slots: make(chan struct{}, limit), inFlight: m.PowerReadsInFlight, waiting: m.PowerReadsWaiting}
}

// acquire waits for a slot; false when ctx ended first (nothing to
// release then).
func (g *readGate) acquire(ctx context.Context) bool {
	select {
	case g.slots <- struct{}{}:
		g.inFlight.Inc()
		return true
	default:
	}
	g.waiting.Inc()
	defer g.waiting.Dec()
	select {
	case g.slots <- struct{}{}:
		g.inFlight.Inc()
		return true
	case <-ctx.Done():
		return false
	}
}

// release gives back a slot taken by acquire.
func (g *readGate) release() {
	g.inFlight.Dec()
	<-g.slots
}
