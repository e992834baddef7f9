package metrics

import "github.com/prometheus/client_golang/prometheus"

// GossipOversizedMetric counts the member states this agent's ring
// refused for a name, address or metadata over its bound
// (NewGossipOversized).
const GossipOversizedMetric = "fenced_gossip_oversized_refused_total"

// NewGossipOversized returns the collector of
// fenced_gossip_oversized_refused_total: count returns the ring's count
// (heartbeat.Ring.OversizedRefused) and is read at each scrape.
func NewGossipOversized(count func() uint64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: GossipOversizedMetric,
		Help: "Gossip member states refused for a name, address or metadata over its bound: no genuine member sends one, any holder of the gossip key can.",
	}, func() float64 { return float64(count()) })
}

// BeatsRefusedMetric counts the sealed beats a fencer's ring could not
// open (NewBeatsRefused).
const BeatsRefusedMetric = "fenced_beats_refused_total"

// NewBeatsRefused returns the collector of fenced_beats_refused_total:
// count returns the ring's count (heartbeat.Ring.BeatsRefused) and is read
// at each scrape.
func NewBeatsRefused(count func() uint64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: BeatsRefusedMetric,
		Help: "Sealed beats no gossip key of this ring opens, dropped: sealed under a key this agent does not hold (a key rotation gone wrong, another cluster on the port) or no beat at all.",
	}, func() float64 { return float64(count()) })
}

// BeatsReceivedMetric counts the beats of alive members a fencer's ring
// took (NewBeatsReceived).
const BeatsReceivedMetric = "fenced_beats_received_total"

// NewBeatsReceived returns the collector of fenced_beats_received_total:
// count returns the ring's count (heartbeat.Ring.BeatsReceived) and is
// read at each scrape.
func NewBeatsReceived(count func() uint64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: BeatsReceivedMetric,
		Help: "Beats of alive members this fencer received (every agent beats to each fencer every gossip.beatInterval); 0 on agents that are no fencer.",
	}, func() float64 { return float64(count()) })
}
