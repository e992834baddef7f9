package main

import (
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/taint"
)

func newHistoryCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history [NODE]",
		Short: "Show every fence and every removal fenced recorded, newest first",
		Long: `Show the fence history: each out-of-service taint fenced applied (by a fencer or
fenced confirm) and each it removed (by a fencer or fenced unfence): when, the
node, who (the fencer's identity, or fenced-confirm/<you> and fenced-unfence/<you>
as the API server knows you), the evidence's method and summary, and why. It
outlives the Events (an hour) and the Node's evidence annotation (gone with the
taint). A fenced node's Node object deleted and registered again are entries
too (node-deleted, node-registered).

It is kept in the ConfigMap ` + taint.HistoryConfigMap + ` in fenced's namespace (fencer.leaseNamespace
of --config, default fenced-system): the newest ` + strconv.Itoa(taint.HistoryPerNode) + ` entries of each node,
and at most ` + strconv.Itoa(taint.HistoryMaxBytes>>10) + ` KiB in all (the oldest entries of the cluster go first).
A write of it that fails is logged and counted (fenced_history_write_failures_total)
and changes no fencing decision; history only reads.

-o json, yaml, jsonpath, go-template and custom-columns read the same document
(custom-columns: one row per element of .entries); --no-headers leaves out the
table's header line. NODE may be a Node that no longer exists but has entries.

Exit codes: 0 shown (also when empty), 1 failed (the API server refused),
2 usage error (a NODE that is neither a Node nor in the history among them),
3 could not check (no kubeconfig, the API server does not answer).`,
		Example: `  fenced history
  fenced history worker-3 -o json
  fenced history -o custom-columns=AT:.at,NODE:.node,ACTION:.action --no-headers`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return exactlyOneNode(cmd, args)
			}
			return nil
		},
		ValidArgsFunction: g.completeNodes(1, false),
	}
	out := outputFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		op, done, err := g.newOperator("")
		if err != nil {
			return err
		}
		defer done()
		h, err := op.History(cmd.Context(), firstArg(args))
		if err != nil {
			return err
		}
		return out.Print(g.stdout, h.Doc(time.Now()))
	}
	return cmd
}
