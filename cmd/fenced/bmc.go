package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/printer"
)

// bmcFlags are shared by the bmc subcommands.
type bmcFlags struct {
	powerTimeout time.Duration
	powerWait    time.Duration
}

func newBMCCommand(g *globals) *cobra.Command {
	f := &bmcFlags{}
	cmd := &cobra.Command{
		Use:   "bmc",
		Short: "Read or switch a node's power directly through its BMC",
		Long: `Talk to a node's BMC through the inventory in the configuration file, with the
same drivers, credentials and timeouts the fencer uses. Use it to check
credentials after adding a node, or to switch a node by hand.

Exit codes: 0 done (state read, or action confirmed by reading the new state),
1 failed (the BMC refused the action, or did not reach the state in time),
2 usage error (wrong flags, unknown node; off or cycle without --yes and without
a terminal), 3 could not check (no or unreadable configuration; the BMC
unreachable, timed out or refused the credentials).`,
		Example: `  fenced bmc status worker-3
  fenced bmc status worker-3 -o json
  fenced bmc off worker-3 --power-timeout 60s`,
	}
	pf := cmd.PersistentFlags()
	pf.DurationVar(&f.powerTimeout, "power-timeout", admin.DefaultPowerTimeout,
		"off/on/cycle: how long to wait for the BMC to report the new state")
	pf.DurationVar(&f.powerWait, "power-wait", admin.DefaultPowerWait,
		"off/on/cycle: pause after sending the request before the first status read")

	for _, sub := range []struct {
		op                   admin.PowerOp
		short, long, example string
	}{
		{admin.PowerStatus, "Read a node's power state and system GUID",
			"Open an authenticated session to the node's BMC and read the chassis power state\nand the system GUID (compared with the Node's systemUUID when fencing).",
			"  fenced bmc status worker-3\n  fenced bmc status worker-3 -o jsonpath='{.power}'"},
		{admin.PowerOff, "Switch a node off (hard) and confirm it reads off",
			"Switch the chassis off without a graceful shutdown, then read the power state\nevery second until it is off (or --power-timeout passes). Already off: nothing is sent.",
			"  fenced bmc off worker-3"},
		{admin.PowerOn, "Switch a node on and confirm it reads on",
			"Switch the chassis on, then read the power state every second until it is on.",
			"  fenced bmc on worker-3"},
		{admin.PowerCycle, "Switch a node off and on again, confirming each step",
			"Switch the chassis off, confirm it reads off, switch it on, confirm it reads on.",
			"  fenced bmc cycle worker-3"},
	} {
		cmd.AddCommand(powerCommand(g, "fenced bmc", sub.op, sub.short, sub.long, sub.example,
			func(cmd *cobra.Command, out *printer.Flags, node string, byHand *admin.ByHand) error {
				return runBMC(cmd, g, f, out, node, sub.op, byHand)
			}))
	}
	return cmd
}

// bypasses ends the help of the commands that switch power by hand.
const bypasses = "\n\nThis bypasses every safety check of the fencer: it does what you ask."

// powerCommand is a subcommand of bmc and device (parent), OP NODE: NODE
// completes with the configuration's nodes, it prints with the output
// flags, and an OP that can do harm (admin.Harmful) takes --yes and
// --reason and gets the go-ahead before run reads or switches anything.
func powerCommand(g *globals, parent string, op admin.PowerOp, short, long, example string,
	run func(cmd *cobra.Command, out *printer.Flags, node string, byHand *admin.ByHand) error) *cobra.Command {
	if op != admin.PowerStatus {
		long += bypasses
	}
	byHand := &admin.ByHand{}
	c := &cobra.Command{
		Use:               string(op) + " NODE",
		Short:             short,
		Long:              long,
		Example:           example,
		Args:              exactlyOneNode,
		ValidArgsFunction: g.completeNodes(1, true),
	}
	if admin.Harmful(op) {
		c.Long += "\n\nIt asks y/N on a terminal; without one it does nothing unless --yes (exit 2).\n" +
			"Before it sends anything it records a Warning Event on the Node naming you (as\n" +
			"the API server knows you), the action and your --reason; without a Kubernetes\n" +
			"configuration it says that nothing is recorded and goes on."
		c.Example += fmt.Sprintf(" --reason \"hung, OPS-1234\"\n  %s %s worker-3 --yes --reason \"hung, OPS-1234\"   # from a script", parent, op)
		consentFlags(c, &byHand.Consent, &byHand.Reason, "the Event on the Node")
	}
	out := outputFlags(c)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if admin.Harmful(op) {
			if err := checkConsent(cmd, &byHand.Consent); err != nil {
				return err
			}
		}
		return run(cmd, out, args[0], byHand)
	}
	return c
}

func runBMC(cmd *cobra.Command, g *globals, f *bmcFlags, out *printer.Flags, node string, op admin.PowerOp, byHand *admin.ByHand) error {
	cfg, err := g.loadConfig(true)
	if err != nil {
		return err
	}
	entry, ok := cfg.BMC(node)
	if !ok {
		return &usageError{command: cmd.CommandPath(),
			err: fmt.Errorf("%w %q: it is not in the BMC inventory of %s", admin.ErrUnknownNode, node, cfg.Source)}
	}
	if admin.Harmful(op) {
		done, err := g.allowPower(cmd, "fenced-bmc", byHand.About(node, op, "its BMC "+admin.BMCEndpoint(entry), "fenced bmc"))
		if err != nil {
			return err
		}
		defer done()
	}
	res, err := admin.UseBMC(cmd.Context(), entry, op,
		admin.SwitchOptions{PowerWait: f.powerWait, Timeout: f.powerTimeout, Progress: g.stderr}, g.log)
	if err != nil {
		return err
	}
	failure := res.Failure()
	// The text of a failure is its error and hint; every other format
	// prints the result, failed or not.
	switch {
	case failure != nil && out.IsText() && res.Hint != "":
		return fmt.Errorf("%w\nhint: %s", failure, res.Hint)
	case failure != nil && out.IsText():
		return failure
	}
	if err := out.Print(g.stdout, res.Doc()); err != nil {
		return err
	}
	if failure != nil {
		return &silentError{err: failure}
	}
	return nil
}
