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
