package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGossipOversized: the counter is the ring's count at each scrape.
func TestGossipOversized(t *testing.T) {
	var n uint64
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewGossipOversized(func() uint64 { return n }))
	for _, want := range []uint64{0, 3} {
		n = want
		exposition := "# HELP " + GossipOversizedMetric + " Gossip member states refused for a name, address or metadata over its bound: no genuine member sends one, any holder of the gossip key can.\n" +
			"# TYPE " + GossipOversizedMetric + " counter\n" + GossipOversizedMetric + " " + map[uint64]string{0: "0", 3: "3"}[want] + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exposition), GossipOversizedMetric); err != nil {
			t.Error(err)
		}
	}
}
