package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"fenced.io/fenced/pkg/vocab"
)

// Metric names read back by `fenced status` from an agent's /metrics
// (pkg/admin), defined once for the exporter and the scraper.
const (
	// MembersMetric counts gossip ring members by state (NewMembers).
	MembersMetric = "fenced_members"
	// NodeStateMetric is 1 for each node's decision phase on a fencer
	// (pkg/fencing, Metrics.NodeState).
	NodeStateMetric = "fenced_node_state"
	// LevelsReadyMetric is, per node, how many fencing levels answered the
	// fencer's last device monitor round (pkg/fencing/monitor.go).
	LevelsReadyMetric = "fenced_node_fence_levels_ready"
	// DryRunMetric is 1 on a fencer running with policy.dryRun, and
	// DryRunActionsMetric counts what it held back, by action.
	DryRunMetric        = "fenced_dry_run"
	DryRunActionsMetric = "fenced_dry_run_actions_total"
	// PausedMetric is 1 on a fencer while fencing is paused cluster-wide.
	PausedMetric = "fenced_paused"
	// NodesExcludedMetric counts Nodes with an exclusion label.
	NodesExcludedMetric = "fenced_nodes_excluded"
	// KubeletGracefulShutdownMetric is 1 when this node's kubelet holds its
	// logind shutdown delay lock (graceful node shutdown configured), 0
	// when logind lists no such lock, -1 when logind cannot be asked
	// (pkg/agent, shutdown.ProbeGraceful).
	KubeletGracefulShutdownMetric = "fenced_kubelet_graceful_shutdown"
)

// memberStates are the states fenced_members always reports, 0 or not.
var memberStates = []vocab.MemberState{vocab.MemberAlive, vocab.MemberSuspect, vocab.MemberDead, vocab.MemberLeft}

var membersDesc = prometheus.NewDesc(MembersMetric,
	"Gossip ring members by state (alive, suspect, dead, left) as this agent sees them.",
	[]string{"state"}, nil)

// members is fenced_members, read from the ring when scraped.
type members func() []vocab.MemberState

// NewMembers returns the collector of fenced_members{state}: states
// returns the state of every ring member (heartbeat.Ring.Members) and is
// called at each scrape, so the gauge is never stale and needs no update
// on gossip changes. All four states are always present.
func NewMembers(states func() []vocab.MemberState) prometheus.Collector {
	return members(states)
}

// Describe implements prometheus.Collector.
func (m members) Describe(ch chan<- *prometheus.Desc) { ch <- membersDesc }

// Collect implements prometheus.Collector.
func (m members) Collect(ch chan<- prometheus.Metric) {
	counts := map[vocab.MemberState]int{}
	for _, s := range m() {
		counts[s]++
	}
	for _, s := range memberStates {
		ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}
