package main

import (
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/taint"
)

func newHistoryCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "history [NODE]",
		Short: "Show every fence and every removal fenced recorded, newest first",
		Long: `Show the fence history: each out-of-service taint fenced applied (by a fencer or
fenced confirm) and each it removed (by a fencer or fenced unfence): when, the
node, who (the fencer's identity, or fenced-confirm/<you> and fenced-unfence/<you>
as the API server knows you), the evidence's method and summary, and why. It
outlives the Events (an hour) and the Node's evidence annotation (gone with the
taint).

It is kept in the ConfigMap ` + taint.HistoryConfigMap + ` in fenced's namespace (fencer.leaseNamespace
of --config, default fenced-system): the newest ` + strconv.Itoa(taint.HistoryPerNode) + ` entries of each node,
and at most ` + strconv.Itoa(taint.HistoryMaxBytes>>10) + ` KiB in all (the oldest entries of the cluster go first).
A write of it that fails is logged and counted (fenced_history_write_failures_total)
and changes no fencing decision; history only reads.

Exit codes: 0 shown (also when empty), 1 failed, 2 usage error.`,
		Example: "  fenced history\n  fenced history worker-3 -o json",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return exactlyOneNode(cmd, args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPowerOutput(cmd, output); err != nil {
				return err
			}
			op, done, err := g.newOperator("")
			if err != nil {
				return err
			}
			defer done()
			h, err := op.History(cmd.Context(), firstArg(args))
			if err != nil {
				return err
			}
			return h.Write(g.stdout, output, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
