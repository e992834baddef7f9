package fencing

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/metrics"
	"fenced.io/fenced/pkg/vocab"
)

// Metrics are the fencer's Prometheus metrics.
type Metrics struct {
	// NodeState is 1 for each node's current phase (fenced_node_state).
	NodeState *prometheus.GaugeVec
	// BMCRequests counts BMC operations by op and result (ok or the
	// ErrorKind).
	BMCRequests *prometheus.CounterVec
	// BMCDuration is the latency of BMC operations by op.
	BMCDuration *prometheus.HistogramVec
	// Fences counts taints applied, by evidence method and result.
	Fences *prometheus.CounterVec
	// TaintsRemoved counts taints removed after recovery.
	TaintsRemoved prometheus.Counter
	// NotReadyWrites counts the Ready=False writes of fenced nodes.
	NotReadyWrites prometheus.Counter
	// FalseSuspicions counts the power reads on beats' silence alone that
	// found the power on.
	FalseSuspicions prometheus.Counter
	// Challenges counts the liveness challenges sent, by result.
	Challenges *prometheus.CounterVec
	// DetectionToTaint is the time from suspicion to the taint.
	DetectionToTaint prometheus.Histogram
	// SafetyAlarms counts safety alarms by reason: a fenced node back with
	// the same boot ID, a storm of clean-shutdown claims.
	SafetyAlarms *prometheus.CounterVec
	// DeviceUp is 1 for each power device that answered the last monitor
	// check, 0 for one that did not (fenced_fence_device_up).
	DeviceUp *prometheus.GaugeVec
	// LevelsReady is, per node, how many of its fencing levels answered
	// the last monitor round (fenced_node_fence_levels_ready); 0 means it
	// cannot be fenced automatically.
	LevelsReady *prometheus.GaugeVec
	// Forgeries counts gossip claims in a node's name that its own key did
	// not sign, by kind (see forgery kinds in verify.go).
	Forgeries *prometheus.CounterVec
	// DryRun is 1 while policy.dryRun is set (fenced_dry_run).
	DryRun prometheus.Gauge
	// DryRunActions counts the actions dry-run held back and reported,
	// once per suspicion, by action (fenced_dry_run_actions_total).
	DryRunActions *prometheus.CounterVec
	// Paused is 1 while the cluster-wide pause is on (fenced_paused).
	Paused prometheus.Gauge
	// NodesExcluded is the number of Nodes with an exclusion label
	// (fenced_nodes_excluded).
	NodesExcluded prometheus.Gauge
	// NodesNewerEvidence is the number of fenced Nodes whose evidence a
	// newer fenced wrote, in a format this fencer does not read: it leaves
	// them alone (fenced_nodes_evidence_newer_format).
	NodesNewerEvidence prometheus.Gauge
	// PowerReadsInFlight is the number of power reads running now
	// (fenced_power_reads_in_flight), at most
	// fencer.maxConcurrentPowerReads.
	PowerReadsInFlight prometheus.Gauge
	// PowerReadsWaiting is the number of power reads waiting for a slot
	// (fenced_power_reads_waiting).
	PowerReadsWaiting prometheus.Gauge
	// KubeletLeaseWatches is the number of kubelet Leases watched now
	// (fenced_kubelet_lease_watches): one per node the fencer has reason
	// to look at (kubeletlease.go), none while every node is healthy.
	KubeletLeaseWatches prometheus.Gauge
	// HistoryWriteFailures counts fence history entries this fencer could
	// not write (fenced_history_write_failures_total): the history is a
	// record for people, so a failure is counted and logged, nothing more.
	HistoryWriteFailures prometheus.Counter
	// FenceOrders counts the fence orders of the watchdog level this
	// fencer wrote or withdrew, by action and result
	// (fenced_fence_orders_total).
	FenceOrders *prometheus.CounterVec
}

// NewMetrics registers the fencer's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		NodeState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metrics.NodeStateMetric,
			Help: "1 for the decision phase each node is in (Healthy, Suspect, Confirming, PoweringOff, Fenced, Recovering, Returning).",
		}, []string{"node", "state"}),
		BMCRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_bmc_requests_total",
			Help: "BMC operations by op (power-status, power-off, power-on) and result (ok, unreachable, timeout, auth, bmc-error, not-supported, no-such-plug).",
		}, []string{"op", "result"}),
		BMCDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fenced_bmc_request_duration_seconds",
			Help:    "Latency of BMC operations, including session setup and, for power actions, confirmation.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"op"}),
		Fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_fences_total",
			Help: "Out-of-service taints applied, by evidence method and result (applied, error).",
		}, []string{"evidence", "result"}),
		TaintsRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_taints_removed_total",
			Help: "Out-of-service taints removed because the node came back with a new boot ID.",
		}),
		NotReadyWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_not_ready_writes_total",
			Help: "Ready=False writes of fenced nodes whose Ready condition still said True: one per fence, unless the kubelet writes Ready=True again (False and Unknown are never written over).",
		}),
		FalseSuspicions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_false_suspicions_total",
			Help: "Power reads made because a node's beats to this fencer stopped, every other channel answering, that found its power on: each a read of a live node (lost packets, a starved node), logged and counted, never an Event.",
		}),
		Challenges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_liveness_challenges_total",
			Help: "Liveness challenges this fencer sent to agents, by result: answered, silent (no proof in time) or failed (no address, a bad proof). Sent when a node's beats are late, with a power read, and in power-off mode while a switch-off is considered.",
		}, []string{"result"}),
		DetectionToTaint: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fenced_detection_to_taint_seconds",
			Help:    "Time from suspecting a node to applying its out-of-service taint.",
			Buckets: []float64{.1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300},
		}),
		SafetyAlarms: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_safety_alarms_total",
			Help: "Safety alarms by reason: FencedNodeBackWithSameBootID (the evidence was wrong), CleanShutdownStorm (too many nodes fenced on their own word), PowerReadingContradicted (a power device read off a node alive in the same boot: wrong device or plug).",
		}, []string{"reason"}),
		DeviceUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fenced_fence_device_up",
			Help: "1 if the power device (bmc:<node>, or a fence device's name) answered the fencer's last monitor check, else 0.",
		}, []string{"device"}),
		LevelsReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metrics.LevelsReadyMetric,
			Help: "Fencing levels of the node whose every device answered the last monitor check; 0: the node cannot be fenced automatically.",
		}, []string{"node"}),
		Forgeries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_gossip_forgeries_total",
			Help: "Claims made over gossip in a node's name that the node's own key did not sign (rejected), by kind.",
		}, []string{"kind"}),
		DryRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.DryRunMetric,
			Help: "1 while policy.dryRun is set: the fencer decides and reports, and changes nothing.",
		}),
		DryRunActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.DryRunActionsMetric,
			Help: "Actions dry-run held back and reported (Events DryRunWould<action>), once per suspicion, by action (Taint, RemoveTaint, MarkNotReady, DeletePods, PowerOff, PowerOn).",
		}, []string{"action"}),
		Paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.PausedMetric,
			Help: "1 while fencing is paused cluster-wide (ConfigMap fenced-pause, key paused: \"true\"): no taint, no Node write, no power action.",
		}),
		NodesExcluded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.NodesExcludedMetric,
			Help: "Nodes labelled fenced.io/exclude=true or remediation.medik8s.io/exclude-from-remediation=true: never read, tainted or switched by fenced.",
		}),
		NodesNewerEvidence: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_nodes_evidence_newer_format",
			Help: "Fenced Nodes whose evidence annotation a newer fenced wrote, in a format this fencer does not read: it leaves them alone (no recovery, no re-fence). Upgrade this fencer.",
		}),
		PowerReadsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_power_reads_in_flight",
			Help: "Power reads (a node's fencing levels, in order) running now; at most fencer.maxConcurrentPowerReads.",
		}),
		PowerReadsWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_power_reads_waiting",
			Help: "Power reads waiting for a slot under fencer.maxConcurrentPowerReads.",
		}),
		KubeletLeaseWatches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_kubelet_lease_watches",
			Help: "Kubelet node Leases this fencer watches now: those of the nodes under suspicion, fenced, returning or whose agent left the ring; none while every node is healthy.",
		}),
		HistoryWriteFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_history_write_failures_total",
			Help: "Fence history entries (ConfigMap fenced-history) this fencer could not write; no fencing decision depends on them.",
		}),
		FenceOrders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_fence_orders_total",
			Help: "Fence orders of the watchdog level this fencer wrote (action write: a node's watchdog is to reset it) or withdrew (action withdraw: the node is back in another boot), by result (ok or error).",
		}, []string{"action", "result"}),
	}
	reg.MustRegister(m.NodeState, m.BMCRequests, m.BMCDuration, m.Fences, m.TaintsRemoved, m.NotReadyWrites, m.FalseSuspicions, m.Challenges, m.DetectionToTaint, m.SafetyAlarms, m.Forgeries, m.DeviceUp, m.LevelsReady,
		m.DryRun, m.DryRunActions, m.Paused, m.NodesExcluded, m.NodesNewerEvidence, m.PowerReadsInFlight, m.PowerReadsWaiting,
		m.KubeletLeaseWatches, m.HistoryWriteFailures, m.FenceOrders)
	return m
}

func (m *Metrics) setPhase(node string, before, now core.Phase) {
	if before == now {
		return
	}
	if before != "" {
		m.NodeState.DeleteLabelValues(node, string(before))
	}
	m.NodeState.WithLabelValues(node, string(now)).Set(1)
}

// forgetNode drops node's series of fenced_node_state: a node whose Node
// is gone has no phase.
func (m *Metrics) forgetNode(node string) {
	m.NodeState.DeletePartialMatch(prometheus.Labels{"node": node})
}

func (m *Metrics) setDryRun(on bool) {
	if on {
		m.DryRun.Set(1)
		return
	}
	m.DryRun.Set(0)
}

func (m *Metrics) bmcRequest(op string, err error, d time.Duration) {
	result := "ok"
	if err != nil {
		result = string(device.KindOf(err))
		if result == "" {
			result = "error"
		}
	}
	m.BMCRequests.WithLabelValues(op, result).Inc()
	m.BMCDuration.WithLabelValues(op).Observe(d.Seconds())
}

func (m *Metrics) fenceOrder(action string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.FenceOrders.WithLabelValues(action, result).Inc()
}

func (m *Metrics) fence(method vocab.EvidenceMethod, err error) {
	result := "applied"
	if err != nil {
		result = "error"
	}
	m.Fences.WithLabelValues(string(method), result).Inc()
}
