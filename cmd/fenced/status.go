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
		Short: "Show every node's readiness, power, taint and fencing evidence in one table",
		Long: `Show one row per node:

  NAME      the Node
  READY     its Ready condition and for how long ("False 3m")
  GOSSIP    the decision phase (Healthy, Suspect, Confirming, PoweringOff, Fenced,
            Recovering, Returning) that the fencer at --agent reports for the node in its
            fenced_node_state metric. Agents do not export each member's gossip
            state, only counts (printed under the table), so without --agent, or
            for a node that agent does not track, this shows "-".
  POWER     read from the node's BMC when it is in the inventory (--config): on,
            off, or the kind of failure (timeout, unreachable, auth, bmc-error);
            "-" when not in the inventory. All BMCs are read concurrently, each
            as the agent reads it (bmc.timeout per attempt, bmc.retries), or
            within --bmc-timeout when given.
  TAINT     the out-of-service taint: fenced (applied by fenced), other (by
            someone else, fenced never removes it), returning (fenced took it off
            and keeps fenced.io/returning until the controller-manager has seen
            that), or -
  EVIDENCE  what fenced recorded: method and who
  SINCE     how long the taint has been there

-o wide adds the boot ID, the BMC endpoint and the evidence's reason; -o json and
-o yaml print everything, including the full evidence; -o name, jsonpath,
go-template and custom-columns read the same document (custom-columns: one row
per element of .nodes). status only reads.

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
	fl.StringVar(&o.AgentURL, "agent", "", "an agent's metrics endpoint (http://HOST:9740) for the GOSSIP column")
	fl.DurationVar(&o.BMCTimeout, "bmc-timeout", 0, "bound for each BMC read, retries included (default: the configuration's bmc.timeout per attempt and bmc.retries, as the agent reads)")
	return cmd
}
