package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/admin"
)

// bmcFlags are shared by the bmc subcommands.
type bmcFlags struct {
	output       string
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
1 failed (BMC unreachable, timed out, refused the credentials, or did not reach
the state in time), 2 usage error (wrong flags, unknown node).`,
		Example: `  fenced bmc status worker-3
  fenced bmc status worker-3 -o json
  fenced bmc off worker-3 --power-timeout 60s`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	pf.DurationVar(&f.powerTimeout, "power-timeout", admin.DefaultPowerTimeout,
		"off/on/cycle: how long to wait for the BMC to report the new state")
	pf.DurationVar(&f.powerWait, "power-wait", admin.DefaultPowerWait,
		"off/on/cycle: pause after sending the request before the first status read")

	switches := []struct {
		op          admin.PowerOp
		short, long string
	}{
		{admin.PowerOff, "Switch a node off (hard) and confirm it reads off",
			"Switch the chassis off without a graceful shutdown, then read the power state\nevery second until it is off (or --power-timeout passes). Already off: nothing is sent."},
		{admin.PowerOn, "Switch a node on and confirm it reads on",
			"Switch the chassis on, then read the power state every second until it is on."},
		{admin.PowerCycle, "Switch a node off and on again, confirming each step",
			"Switch the chassis off, confirm it reads off, switch it on, confirm it reads on."},
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "status NODE",
		Short:   "Read a node's power state and system GUID",
		Long:    "Open an authenticated session to the node's BMC and read the chassis power state\nand the system GUID (compared with the Node's systemUUID when fencing).",
		Example: "  fenced bmc status worker-3\n  fenced bmc status worker-3 -o json | jq -r .power",
		Args:    exactlyOneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBMC(cmd, g, f, args[0], admin.PowerStatus, nil)
		},
	})
	for _, sw := range switches {
		sub := &cobra.Command{
			Use:     string(sw.op) + " NODE",
			Short:   sw.short,
			Long:    sw.long + "\n\nThis bypasses every safety check of the fencer: it does what you ask." + byHandHelp(sw.op),
			Example: fmt.Sprintf("  fenced bmc %s worker-3", sw.op) + byHandExample("fenced bmc", sw.op),
			Args:    exactlyOneNode,
		}
		cmd.AddCommand(powerSwitch(sub, sw.op, func(cmd *cobra.Command, node string, byHand *admin.ByHand) error {
			return runBMC(cmd, g, f, node, sw.op, byHand)
		}))
	}
	return cmd
}

// byHandHelp is what the help of a switch that can do harm adds: the
// question, --yes, and the Event.
func byHandHelp(op admin.PowerOp) string {
	if !admin.Harmful(op) {
		return ""
	}
	return "\n\nIt asks y/N on a terminal; without one it does nothing unless --yes (exit 2).\n" +
		"Before it sends anything it records a Warning Event on the Node naming you (as\n" +
		"the API server knows you), the action and your --reason; without a Kubernetes\n" +
		"configuration it says that nothing is recorded and goes on."
}

// byHandExample is the example line a switch that can do harm adds: the
// same switch from a script.
func byHandExample(command string, op admin.PowerOp) string {
	if !admin.Harmful(op) {
		return ""
	}
	return fmt.Sprintf(" --reason \"hung, OPS-1234\"\n  %s %s worker-3 --yes --reason \"hung, OPS-1234\"   # from a script", command, op)
}

func runBMC(cmd *cobra.Command, g *globals, f *bmcFlags, node string, op admin.PowerOp, byHand *admin.ByHand) error {
	if err := checkPowerOutput(cmd, f.output); err != nil {
		return err
	}
	if admin.Harmful(op) {
		if err := checkConsent(cmd, &byHand.Consent); err != nil {
			return err
		}
	}
	cfg, err := g.loadConfig(true)
	if err != nil {
		return err
	}
	entry, ok := cfg.BMC(node)
	if !ok {
		return &usageError{command: cmd.CommandPath(),
			err: fmt.Errorf("node %q is not in the BMC inventory of %s", node, cfg.Source)}
	}
	if admin.Harmful(op) {
		auditor, done := g.auditor("fenced-bmc", g.stderr)
		defer done()
		if err := auditor.AllowPower(cmd.Context(), byHand.About(node, op, "its BMC "+admin.BMCEndpoint(entry), "fenced bmc")); err != nil {
			return err
		}
	}
	res, err := admin.UseBMC(cmd.Context(), entry, op,
		admin.SwitchOptions{PowerWait: f.powerWait, Timeout: f.powerTimeout, Progress: g.stderr}, g.log)
	switch {
	case err != nil:
		return err
	case f.output == "json":
		if err := res.Write(g.stdout, f.output); err != nil {
			return err
		}
		if res.Err != nil {
			return &silentError{err: res.Err}
		}
		return nil
	case res.Err != nil && res.Hint != "":
		return fmt.Errorf("%w\nhint: %s", res.Err, res.Hint)
	case res.Err != nil:
		return res.Err
	}
	return res.Write(g.stdout, f.output)
}

// checkPowerOutput checks the -o of the bmc and device commands.
func checkPowerOutput(cmd *cobra.Command, output string) error {
	if output != "text" && output != "json" {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("--output %q: want text or json", output)}
	}
	return nil
}
