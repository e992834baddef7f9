package metrics

import (
	"crypto/x509"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	certutil "k8s.io/client-go/util/cert"
)

// Metrics that tell whether fencing is armed: a fencer is running and
// ready, it has nodes it could fence, and a systemd agent's API
// credential is not about to expire. The alerts that use them
// (deploy/monitoring/prometheus-rules.yaml) must also fire when no agent
// exports them at all, with absent().
const (
	// AgentReadyMetric is 1 while the agent's /readyz answers ok, by role
	// (observer, fencer).
	AgentReadyMetric = "fenced_agent_ready"
	// InventoryNodesMetric counts, on a fencer, the Nodes its inventory
	// gives at least one fencing level.
	InventoryNodesMetric = "fenced_inventory_nodes"
	// ClientCertNotAfterMetric and ClientCertNotBeforeMetric are the
	// validity bounds of the client certificate the agent authenticates to
	// the API server with (a systemd agent's, from `fenced credentials
	// issue`), in Unix seconds.
	ClientCertNotAfterMetric  = "fenced_client_certificate_not_after_timestamp_seconds"
	ClientCertNotBeforeMetric = "fenced_client_certificate_not_before_timestamp_seconds"
)

var agentReadyDesc = prometheus.NewDesc(AgentReadyMetric,
	"1 while the agent is ready (/readyz answers ok: it is in the gossip ring), else 0; role is observer or fencer (a fencer has power devices in its configuration).",
	[]string{"role"}, nil)

// agentReady is fenced_agent_ready, read from the agent's readiness when
// scraped.
type agentReady struct {
	role  string
	ready func() error
}

// NewAgentReady returns the collector of fenced_agent_ready{role}: ready
// is the function /readyz answers with (Handler), called at each scrape,
// so the metric and /readyz cannot disagree.
func NewAgentReady(role string, ready func() error) prometheus.Collector {
	return agentReady{role: role, ready: ready}
}

// Describe implements prometheus.Collector.
func (a agentReady) Describe(ch chan<- *prometheus.Desc) { ch <- agentReadyDesc }

// Collect implements prometheus.Collector.
func (a agentReady) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if a.ready() == nil {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(agentReadyDesc, prometheus.GaugeValue, v, a.role)
}

// NewInventoryNodes returns the collector of fenced_inventory_nodes:
// count returns how many of the cluster's Nodes the fencer's inventory
// gives a fencing level (fencing.Fencer.InventoryNodes) and is called at
// each scrape. It is counted against the Node list, not the configuration
// alone: topology defaults give every node levels, and an inventory keyed
// by names no Node has fences nothing.
func NewInventoryNodes(count func() int) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: InventoryNodesMetric,
		Help: "Nodes of the cluster that this fencer's inventory gives at least one fencing level (a BMC, a topology level); 0: it can fence no node.",
	}, func() float64 { return float64(count()) })
}

var (
	clientCertNotAfterDesc = prometheus.NewDesc(ClientCertNotAfterMetric,
		"When the client certificate the agent authenticates to the API server with expires (its notAfter), in Unix seconds; as the certificate file reads now (client-go reloads it every 5 minutes).",
		nil, nil)
	clientCertNotBeforeDesc = prometheus.NewDesc(ClientCertNotBeforeMetric,
		"When the client certificate the agent authenticates to the API server with became valid (its notBefore), in Unix seconds.",
		nil, nil)
)

// clientCert is the pair of client certificate gauges, read from the
// certificate's file at each scrape.
type clientCert struct {
	read func() ([]byte, error)

	mu sync.Mutex
	// last is the last certificate read and parsed: a file being replaced
	// or unreadable for a moment keeps what client-go keeps, the
	// certificate it loaded before.
	last *x509.Certificate
}

// NewClientCertificate returns the collector of
// fenced_client_certificate_not_after_timestamp_seconds and
// fenced_client_certificate_not_before_timestamp_seconds. read returns the
// PEM the agent's kubeconfig names (a file renewals replace, or the data
// embedded in the kubeconfig); the first CERTIFICATE block is the client's
// own. It is read at each scrape. Until one read succeeds the collector
// exports nothing.
func NewClientCertificate(read func() ([]byte, error)) prometheus.Collector {
	return &clientCert{read: read}
}

// Describe implements prometheus.Collector.
func (c *clientCert) Describe(ch chan<- *prometheus.Desc) {
	ch <- clientCertNotAfterDesc
	ch <- clientCertNotBeforeDesc
}

// Collect implements prometheus.Collector.
func (c *clientCert) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if data, err := c.read(); err == nil {
		if certs, err := certutil.ParseCertsPEM(data); err == nil {
			c.last = certs[0]
		}
	}
	if c.last == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(clientCertNotAfterDesc, prometheus.GaugeValue, float64(c.last.NotAfter.Unix()))
	ch <- prometheus.MustNewConstMetric(clientCertNotBeforeDesc, prometheus.GaugeValue, float64(c.last.NotBefore.Unix()))
}
