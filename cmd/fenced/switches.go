package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/taint"
)

// switchCommand is one of pause, resume, exclude and include: what it
// says, and which admin call turns the switch.
type switchCommand struct {
	use, short, long, example string
	// node: it takes one NODE (completed with the API's Nodes), else no
	// argument.
	node bool
	turn func(ctx context.Context, op *admin.Operator, node, reason string) (admin.SwitchChange, error)
}

// The words every switch command's help ends with, and where the pause is.
var (
	switchHelpCommon = "\n\nIt is idempotent (a switch already in place is left alone), prints what\n" +
		"changed (-o json, yaml, name, jsonpath…: as every command), and records an\n" +
		"Event naming you (as the API server knows you) and your --reason. Nothing\n" +
		"here can lead to a taint or a power action that the fencers' evidence rules\n" +
		"do not allow.\n\n" +
		"Exit codes: 0 done (or nothing to do), 1 failed (the API server refused),\n" +
		"2 usage error (for exclude and include also a NODE that does not exist),\n" +
		"3 could not check (no kubeconfig, the API server does not answer)."
	pauseWhere = fmt.Sprintf("the ConfigMap %s in fenced's namespace (fencer.leaseNamespace of --config,\ndefault fenced-system), key %s", taint.PauseConfigMap, taint.PauseKey)
)

// switchCommands are fenced pause, resume, exclude and include: the
// operator's switches that live in the cluster, written exactly as the
// fencers read them (docs/operations.md, "Switches").
var switchCommands = []switchCommand{
	{use: "pause", short: "Pause fencing cluster-wide: no taint, Node write or power action until resumed",
		long: "Pause every fencer at once: " + pauseWhere + ` set to "true", with your
--reason. The fencers keep observing and deciding, and report what the pause
holds (Events PausedWould…, fenced_paused); within a second none writes a
taint or a Node or switches any power. fenced resume ends it.` + switchHelpCommon,
		example: `  fenced pause --reason "SAN firmware update, CHG-1234"`,
		turn: func(ctx context.Context, op *admin.Operator, _, reason string) (admin.SwitchChange, error) {
			return op.Pause(ctx, reason)
		}},
	{use: "resume", short: "End the cluster-wide pause",
		long: "End the pause: " + pauseWhere + ` set to "false" (the ConfigMap stays,
with its Events). Every fencer looks at every node again at once and carries
out what the pause held, with its usual evidence rules.` + switchHelpCommon,
		example: "  fenced resume",
		turn: func(ctx context.Context, op *admin.Operator, _, reason string) (admin.SwitchChange, error) {
			return op.Resume(ctx, reason)
		}},
	{use: "exclude NODE", short: "Exclude a node from fencing: no automatic power read, taint or power action",
		long: "Label the Node " + taint.ExcludeLabel + "=" + taint.ExcludeValue + `: the fencers read no power, apply no
taint and switch nothing for it (they still remove a taint of theirs once the
node is back). fenced confirm still works on it: that is a person's decision.
fenced include ends it.` + switchHelpCommon,
		example: `  fenced exclude worker-3 --reason "BMC firmware update"`, node: true,
		turn: func(ctx context.Context, op *admin.Operator, node, reason string) (admin.SwitchChange, error) {
			return op.Exclude(ctx, node, reason)
		}},
	{use: "include NODE", short: "Include an excluded node in fencing again",
		long: "Remove the label " + taint.ExcludeLabel + ` from the Node. A node that medik8s' label
` + taint.Medik8sExcludeLabel + ` also excludes stays excluded (that label
is its Node Maintenance Operator's): include says so.` + switchHelpCommon,
		example: "  fenced include worker-3", node: true,
		turn: func(ctx context.Context, op *admin.Operator, node, reason string) (admin.SwitchChange, error) {
			return op.Include(ctx, node, reason)
		}},
}

// newSwitchCommand builds one of switchCommands.
func newSwitchCommand(g *globals, sc switchCommand) *cobra.Command {
	var reason string
	cmd := &cobra.Command{Use: sc.use, Short: sc.short, Long: sc.long, Example: sc.example, Args: noArgs}
	if sc.node {
		cmd.Args, cmd.ValidArgsFunction = exactlyOneNode, g.completeNodes(1, false)
	}
	out := outputFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		op, done, err := g.newOperator("fenced-" + cmd.Name())
		if err != nil {
			return err
		}
		defer done()
		// What the operator says besides the result (who you are, when
		// the API server does not say) goes to standard error, so that
		// -o json stays one document.
		op.Out = g.stderr
		c, err := sc.turn(cmd.Context(), op, firstArg(args), reason)
		if err != nil {
			return err
		}
		return out.Print(g.stdout, c.Doc())
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the Event)")
	return cmd
}
