package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/metrics"
	"fenced.io/fenced/pkg/systemd"
)

// defaultMetricsAddress is where the agent serves /metrics, /healthz and
// /readyz unless --metrics-address says otherwise.
const defaultMetricsAddress = ":9740"

func newAgentCommand(g *globals) *cobra.Command {
	var metricsAddress string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent (observer, or fencer when a BMC inventory is configured)",
		Long: `Run the fenced agent on a node.

Every node runs an agent. An agent whose configuration holds a BMC inventory is
a fencer: it watches Nodes and confirms the power state of nodes that stop
answering before it taints them.

The agent checks its configuration and Kubernetes credentials at start and exits
non-zero, naming the problem, before it joins anything. It serves /metrics,
/healthz and /readyz, tells systemd when it is ready (Type=notify), and stops on
SIGTERM or SIGINT.`,
		Example: `  # as a systemd unit on a control-plane host
  fenced agent --config /etc/fenced/config.yaml --kubeconfig /etc/kubernetes/admin.conf

  # in a DaemonSet pod (in-cluster credentials), metrics on the host's port 9740
  fenced agent --config /etc/fenced/config.yaml --log-format json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd.Context(), g, metricsAddress)
		},
	}
	cmd.Flags().StringVar(&metricsAddress, "metrics-address", defaultMetricsAddress,
		`address for /metrics, /healthz and /readyz ("" disables)`)
	return cmd
}

func runAgent(ctx context.Context, g *globals, metricsAddress string) error {
	cfg, err := g.loadConfig(false)
	if err != nil {
		return err
	}
	kube, err := g.restConfig()
	if err != nil {
		return err
	}
	role := "observer"
	if len(cfg.BMCs) > 0 {
		role = "fencer"
	}

	var serveErr chan error
	if metricsAddress != "" {
		l, err := net.Listen("tcp", metricsAddress)
		if err != nil {
			return fmt.Errorf("--metrics-address: %w", err)
		}
		srv := &http.Server{
			Handler:           metrics.Handler(metrics.NewRegistry(version), func() error { return nil }),
			ReadHeaderTimeout: 5 * time.Second,
		}
		serveErr = make(chan error, 1)
		go func() { serveErr <- srv.Serve(l) }()
		defer func() {
			shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdownCtx)
		}()
		g.log.Info("serving metrics and health", "address", l.Addr().String())
	}

	g.log.Info("agent started", "role", role, "config", cfg.Source,
		"bmcs", len(cfg.BMCs), "apiServer", kube.Host, "version", version)
	if _, err := systemd.Notify(systemd.Ready, systemd.Status(fmt.Sprintf("running as %s", role))); err != nil {
		g.log.Warn("could not notify systemd", "err", err)
	}

	select {
	case <-ctx.Done():
		g.log.Info("agent stopping", "reason", "signal")
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics server: %w", err)
		}
	}
	_, _ = systemd.Notify(systemd.Stopping)
	return nil
}
