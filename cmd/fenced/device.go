package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/config"
)

// deviceFlags are shared by the device subcommands.
type deviceFlags struct {
	output       string
	level        int
	powerTimeout time.Duration
	powerWait    time.Duration
}

func newDeviceCommand(g *globals) *cobra.Command {
	f := &deviceFlags{}
	cmd := &cobra.Command{
		Use:   "device",
		Short: "Read or switch a node's power through its fencing levels (BMC, PDU outlets, fence agents)",
		Long: `Read or switch the power of a node through every power device the configuration
gives it, level by level (fencing topology: its BMC, the PDU outlets that feed
it, a hypervisor, any ClusterLabs fence agent), with the same drivers,
credentials and timeouts the fencer uses.

status reads every plug of every level and says which level decides, and what:
a level decides when every plug of it answers; it reads off only when every
plug reads off. off/on/cycle switch every plug of one level (--level, default:
the first level where all of them can be switched) and confirm the new state.

Exit codes: 0 done, 1 failed (no level could be read or switched), 2 usage error.`,
		Example: `  fenced device status worker-3
  fenced device status worker-3 -o json
  fenced device off worker-3 --level 2`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	pf.IntVar(&f.level, "level", 0, "only this fencing level (from 1); default: all levels for status, the first that works for off/on/cycle")
	pf.DurationVar(&f.powerTimeout, "power-timeout", admin.DefaultPowerTimeout,
		"off/on/cycle: how long to wait for each plug to report the new state")
	pf.DurationVar(&f.powerWait, "power-wait", admin.DefaultPowerWait,
		"off/on/cycle: pause after sending the request before the first status read")

	cmd.AddCommand(&cobra.Command{
		Use:     "status NODE",
		Short:   "Read every plug of every fencing level of a node",
		Example: "  fenced device status worker-3",
		Args:    exactlyOneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDevice(cmd, g, f, args[0], admin.PowerStatus, nil)
		},
	})
	for _, sw := range []struct {
		op    admin.PowerOp
		short string
	}{
		{admin.PowerOff, "Switch every plug of a level off and confirm each reads off"},
		{admin.PowerOn, "Switch every plug of a level on and confirm each reads on"},
		{admin.PowerCycle, "Switch every plug of a level off and on again, confirming each step"},
	} {
		sub := &cobra.Command{
			Use:   string(sw.op) + " NODE",
			Short: sw.short,
			Long: sw.short + ". Without --level the levels are tried in order until one\n" +
				"switches completely.\n\nThis bypasses every safety check of the fencer: it does what you ask." + byHandHelp(sw.op),
			Example: fmt.Sprintf("  fenced device %s worker-3 --level 2", sw.op) + byHandExample("fenced device", sw.op),
			Args:    exactlyOneNode,
		}
		cmd.AddCommand(powerSwitch(sub, sw.op, func(cmd *cobra.Command, node string, byHand *admin.ByHand) error {
			return runDevice(cmd, g, f, node, sw.op, byHand)
		}))
	}
	return cmd
}

// openPowerDevices checks the output format, then loads the configuration
// and opens its power devices, as the fencer would.
func openPowerDevices(cmd *cobra.Command, g *globals, output string) (*config.Config, *admin.PowerDevices, error) {
	if err := checkPowerOutput(cmd, output); err != nil {
		return nil, nil, err
	}
	cfg, err := g.loadConfig(true)
	if err != nil {
		return nil, nil, err
	}
	devs, err := admin.OpenPowerDevices(cfg, g.log, g.stderr)
	if err != nil {
		return nil, nil, err
	}
	return cfg, devs, nil
}

func runDevice(cmd *cobra.Command, g *globals, f *deviceFlags, node string, op admin.PowerOp, byHand *admin.ByHand) error {
	if admin.Harmful(op) {
		if err := checkConsent(cmd, &byHand.Consent); err != nil {
			return err
		}
	}
	cfg, devs, err := openPowerDevices(cmd, g, f.output)
	if err != nil {
		return err
	}
	defer devs.Close()
	levels := devs.LevelCount(node)
	if levels == 0 {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("node %q has no power device in %s (no bmc entry, no topology levels)", node, cfg.Source)}
	}
	if f.level < 0 || f.level > levels {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("--level %d: node %s has levels 1 to %d", f.level, node, levels)}
	}
	if admin.Harmful(op) {
		auditor, done := g.auditor("fenced-device", g.stderr)
		defer done()
		if err := auditor.AllowPower(cmd.Context(), byHand.About(node, op, admin.LevelsText(f.level), "fenced device")); err != nil {
			return err
		}
	}
	res := devs.Use(cmd.Context(), node, f.level, op,
		admin.SwitchOptions{PowerWait: f.powerWait, Timeout: f.powerTimeout, Progress: g.stderr})
	if err := res.Write(g.stdout, f.output); err != nil {
		return err
	}
	if !res.OK {
		return &silentError{err: errors.New(res.Decision)}
	}
	return nil
}

func newTopologyCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Check the fencing topology of the configuration",
	}
	check := &cobra.Command{
		Use:   "check [NODE...]",
		Short: "Read every fencing level of every node and say which nodes could be fenced now",
		Long: `Read the power state through every plug of every fencing level of each node
named in the configuration (bmc entries, topology nodes, fence devices' plugs
maps) or on the command line, and print a table: one row per node and level.
Nothing is switched.

Exit codes: 0 every node has a level that answers completely, 1 some node has
none (it could not be fenced automatically now), 2 usage error.`,
		Example: "  fenced topology check\n  fenced topology check worker-3 worker-4 -o json",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTopologyCheck(cmd, g, output, args)
		},
	}
	check.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.AddCommand(check)
	return cmd
}

func runTopologyCheck(cmd *cobra.Command, g *globals, output string, nodes []string) error {
	cfg, devs, err := openPowerDevices(cmd, g, output)
	if err != nil {
		return err
	}
	defer devs.Close()
	if len(nodes) == 0 {
		nodes = admin.ConfiguredNodes(cfg)
	}
	if len(nodes) == 0 {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("%s names no nodes; name them on the command line", cfg.Source)}
	}
	check := devs.CheckTopology(cmd.Context(), nodes)
	if err := check.Write(g.stdout, output); err != nil {
		return err
	}
	if err := check.Err(); err != nil {
		return &silentError{err: err}
	}
	return nil
}
