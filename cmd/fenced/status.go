package main

import (
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/admin"
)

func newStatusCommand(g *globals) *cobra.Command {
	var o admin.StatusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every node's readiness, power, taint and fencing evidence, and whether fencing is armed",
		Long: "Show one row per node, with these columns:\n\n" + admin.StatusColumnsHelp() + `
Under the table, whether fencing is armed, read from the API: each fencer as
it publishes itself on its Lease in fenced's namespace, in a pod or run by
systemd alike (ready, or stale when it has not renewed for 90 s; mode, dry-run,
how many nodes it can fence, the hash of its configuration file), the
cluster-wide pause and its reason (fenced pause), and how many nodes are
excluded (fenced exclude). Armed: a ready fencer not in dry-run with nodes to
fence, and no pause. With --agent, that fencer's own view too:
the gossip ring, its pause and dry-run.

-o json and -o yaml print everything, including the full evidence (fields:
nodes, fencing, agent); -o name, jsonpath, go-template and custom-columns read
the same document (custom-columns: one row per element of .nodes). --no-headers
leaves out the table's header line. status only reads.

Exit codes: 0 printed, 2 usage error, 3 could not check (no kubeconfig, the API
server does not answer, an unreadable configuration).`,
		Example: `  fenced status
  fenced status -o wide --config /etc/fenced/config.yaml --agent http://10.0.0.5:9740
  fenced status -o jsonpath='{.nodes[?(@.taint=="fenced")].name}'
  fenced status -o custom-columns=NODE:.name,POWER:.power --no-headers`,
		Args: noArgs,
	}
	out := outputFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		op, done, err := g.newOperator("")
		if err != nil {
			return err
		}
		defer done()
		s, err := op.Status(cmd.Context(), o)
		if err != nil {
			return err
		}
		return out.Print(g.stdout, s.Doc(time.Now()))
	}
	fl := cmd.Flags()
	fl.StringVar(&o.AgentURL, "agent", "", "an agent's metrics endpoint (http://HOST:9740) for the PHASE and LEVELS columns and its own view")
	fl.DurationVar(&o.BMCTimeout, "bmc-timeout", 0, "bound for each BMC read, retries included (default: the configuration's bmc.timeout per attempt and bmc.retries, as the agent reads)")
	return cmd
}
