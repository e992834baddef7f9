package main

import (
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/admin"
)

func newStatusCommand(g *globals) *cobra.Command {
	var (
		o      admin.StatusOptions
		output string
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every node's readiness, power, taint and fencing evidence, and whether fencing is armed",
		Long: "Show one row per node, with these columns:\n\n" + admin.StatusColumnsHelp() + `
Under the table, whether fencing is armed, read from the API: the fencer pods
that are ready (fencers run as systemd units have no pod), what the fencers'
configuration says (dry-run, mode, inventory: from the ConfigMap their pods
mount), the cluster-wide pause and its reason (fenced pause), and how many
nodes are excluded (fenced exclude). With --agent, that fencer's own view too:
the gossip ring, its pause and dry-run.

-o json and -o yaml print everything, including the full evidence (fields:
nodes, fencing, agent). status only reads.`,
		Example: `  fenced status
  fenced status -o wide --config /etc/fenced/config.yaml --agent http://10.0.0.5:9740
  fenced status -o json | jq '.nodes[] | select(.taint == "fenced") | .name'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := admin.CheckFormat(output); err != nil {
				return &usageError{command: cmd.CommandPath(), err: err}
			}
			op, done, err := g.newOperator("")
			if err != nil {
				return err
			}
			defer done()
			s, err := op.Status(cmd.Context(), o)
			if err != nil {
				return err
			}
			return s.Write(g.stdout, output, time.Now())
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&output, "output", "o", "", "output format: wide, json or yaml (default: a table)")
	fl.StringVar(&o.AgentURL, "agent", "", "an agent's metrics endpoint (http://HOST:9740) for the PHASE and LEVELS columns and its own view")
	fl.DurationVar(&o.BMCTimeout, "bmc-timeout", 0, "bound for each BMC read, retries included (default: the configuration's bmc.timeout per attempt and bmc.retries, as the agent reads)")
	return cmd
}
