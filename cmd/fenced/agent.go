package main

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"fenced.io/fenced/pkg/agent"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/shutdown"
	"fenced.io/fenced/pkg/version"
)

// defaultMetricsAddress is where the agent serves /metrics, /healthz and
// /readyz unless --metrics-address says otherwise.
const defaultMetricsAddress = ":9740"

// agentFlags are the settings that differ per host; everything shared
// lives in the configuration file.
type agentFlags struct {
	nodeName        string
	bootIDFile      string
	gossipBind      string
	gossipAdvertise string
	seeds           []string
	insecureGossip  bool
	metricsAddress  string
	profiling       bool
	kubeletRootDir  string
}

func newAgentCommand(g *globals) *cobra.Command {
	f := &agentFlags{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent (observer, or fencer when power devices are configured)",
		Long: `Run the fenced agent on a node.

Every node runs an agent: it joins the gossip ring (through the other Nodes'
InternalIPs), publishes its node name, boot ID and state, and serves /metrics,
/healthz and /readyz. An agent whose configuration holds power devices (a BMC
inventory, fence devices in a fencing topology) is also a fencer: it watches
Nodes, reads the power of nodes that stop answering through their fencing levels
(the BMC first, then PDU outlets or any fence agent), and taints them
out-of-service only when a whole level reads off.

The agent checks its configuration, gossip key, BMC credentials and Kubernetes
credentials at start and exits non-zero, naming the problem, before it joins
anything. It tells systemd when it is ready (Type=notify) and leaves the ring
cleanly on SIGTERM or SIGINT.

Clean shutdowns: the agent holds a systemd-logind shutdown delay lock (over the
D-Bus system bus). When the host shuts down it announces "shutting-down", waits
until no CSI volume is mounted under --kubelet-root-dir any more (the kubelet's
graceful node shutdown unmounts them), announces "shutdown-complete" and leaves
the ring; fencers then taint the node without asking its BMC. If volumes stay
mounted until logind's InhibitDelayMaxSec runs out, it leaves without that
announcement and fencers wait for the BMC as usual. Without logind the agent
says so and works on (shutdown.announce: false turns this off).`,
		Example: `  # as a systemd unit on a control-plane host (a fencer: its config has the power devices)
  fenced agent --config /etc/fenced/config.yaml --kubeconfig /etc/fenced/kubeconfig

  # in a DaemonSet pod (in-cluster credentials, NODE_NAME from the downward API)
  fenced agent --config /etc/fenced/config.yaml --log-format json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.nodeName, "node-name", "", "this host's Kubernetes node name (default: $NODE_NAME, $FENCED_NODE_NAME, then the host name)")
	fl.StringVar(&f.bootIDFile, "boot-id-file", "/proc/sys/kernel/random/boot_id", "file holding this host's boot ID ($FENCED_BOOT_ID overrides)")
	fl.StringVar(&f.gossipBind, "gossip-bind-address", "", "address gossip listens on (default: all)")
	fl.StringVar(&f.gossipAdvertise, "gossip-advertise-address", "", "address peers reach this agent at (default: the InternalIP of this host's Node; it must be one of the Node's addresses, where agents answer a fencer's liveness challenges)")
	fl.StringSliceVar(&f.seeds, "seeds", nil, "extra host[:port] addresses to join the ring through (the Nodes' InternalIPs are always tried)")
	fl.BoolVar(&f.insecureGossip, "insecure-gossip", false, "allow gossip without the encryption key (anyone on the network could join)")
	fl.StringVar(&f.metricsAddress, "metrics-address", defaultMetricsAddress, `address for /metrics, /healthz and /readyz ("" disables)`)
	fl.BoolVar(&f.profiling, "profiling", false, "serve Go's CPU, heap and goroutine profiles at the metrics address under /debug/pprof/ (for a developer chasing CPU or memory; anyone who reaches the address can read them)")
	fl.StringVar(&f.kubeletRootDir, "kubelet-root-dir", shutdown.DefaultKubeletRootDir, "the kubelet's --root-dir, where it mounts CSI volumes (watched during a clean shutdown)")
	return cmd
}

func runAgent(cmd *cobra.Command, g *globals, f *agentFlags) error {
	err := buildAndRunAgent(cmd, g, f)
	if err != nil && g.logFormat == "json" {
		// Everything the agent writes with --log-format json is a JSON
		// line, its last words too.
		g.log.Error("agent failed", "component", "agent", "err", err)
		return &silentError{err: err}
	}
	return err
}

func buildAndRunAgent(cmd *cobra.Command, g *globals, f *agentFlags) error {
	for flag, addr := range map[string]string{"--gossip-bind-address": f.gossipBind, "--gossip-advertise-address": f.gossipAdvertise} {
		if addr != "" && net.ParseIP(addr) == nil {
			return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("%s %q is not an IP address", flag, addr)}
		}
	}
	cfg, err := g.loadConfig(false)
	if err != nil {
		return err
	}
	nodeName := firstNonEmpty(f.nodeName, os.Getenv("NODE_NAME"), os.Getenv("FENCED_NODE_NAME"))
	if nodeName == "" {
		if nodeName, err = os.Hostname(); err != nil {
			return fmt.Errorf("no node name: pass --node-name (%w)", err)
		}
	}
	bootID := os.Getenv("FENCED_BOOT_ID")
	if bootID == "" {
		b, err := os.ReadFile(f.bootIDFile)
		if err != nil {
			return fmt.Errorf("boot ID: %w", err)
		}
		bootID = strings.TrimSpace(string(b))
	}
	opts := agent.Options{
		Config: cfg, Version: version.Version(), NodeName: nodeName, BootID: bootID,
		GossipBind: f.gossipBind, GossipAdvertise: f.gossipAdvertise, Seeds: f.seeds,
		InsecureGossip: f.insecureGossip, MetricsAddress: f.metricsAddress, Profiling: f.profiling, KubeletRootDir: f.kubeletRootDir,
		Logger: g.log,
	}
	rc, err := g.restConfig()
	if err != nil {
		return err
	}
	// client-go's default of 5 requests a second is too few for a fencer
	// in a rack failure (config.DefaultClientQPS says why).
	rc.QPS, rc.Burst = config.DefaultClientQPS, config.DefaultClientBurst
	if opts.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	opts.ClientCertificate = clientCertificate(rc.TLSClientConfig)
	// Everything that can be wrong in the input is checked here, before
	// the agent touches the network.
	a, err := agent.New(opts)
	if err != nil {
		return err
	}
	return a.Run(cmd.Context())
}

// clientCertificate reads the client certificate a kubeconfig authenticates
// with, for the agent's certificate expiry gauges: the file it names, read
// again each time (renewals replace it and client-go reloads it), or the
// data embedded in it; nil without one (a service account token).
func clientCertificate(tls rest.TLSClientConfig) func() ([]byte, error) {
	switch {
	case tls.CertFile != "":
		return func() ([]byte, error) { return os.ReadFile(tls.CertFile) }
	case len(tls.CertData) > 0:
		data := tls.CertData
		return func() ([]byte, error) { return data, nil }
	}
	return nil
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
