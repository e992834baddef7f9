package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/printer"
)

// deviceFlags are shared by the device subcommands.
type deviceFlags struct {
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

Exit codes: 0 done, 1 failed (a level was reached but did not switch), 2 usage
error (wrong flags, unknown node, no such level; off or cycle without --yes and
without a terminal), 3 could not check (no or unreadable configuration; no level
could be read; no plug of a switch answered).`,
		Example: `  fenced device status worker-3
  fenced device status worker-3 -o json
  fenced device off worker-3 --level 2`,
	}
	pf := cmd.PersistentFlags()
	pf.IntVar(&f.level, "level", 0, "only this fencing level (from 1); default: all levels for status, the first that works for off/on/cycle")
	pf.DurationVar(&f.powerTimeout, "power-timeout", admin.DefaultPowerTimeout,
		"off/on/cycle: how long to wait for each plug to report the new state")
	pf.DurationVar(&f.powerWait, "power-wait", admin.DefaultPowerWait,
		"off/on/cycle: pause after sending the request before the first status read")

	for _, sub := range []struct {
		op             admin.PowerOp
		short, example string
	}{
		{admin.PowerStatus, "Read every plug of every fencing level of a node",
			"  fenced device status worker-3\n  fenced device status worker-3 -o custom-columns=LEVEL:.level,PLUG:.device,POWER:.power"},
		{admin.PowerOff, "Switch every plug of a level off and confirm each reads off", ""},
		{admin.PowerOn, "Switch every plug of a level on and confirm each reads on", ""},
		{admin.PowerCycle, "Switch every plug of a level off and on again, confirming each step", ""},
	} {
		long, example := "", sub.example
		if sub.op != admin.PowerStatus {
			long = sub.short + ". Without --level the levels are tried in order until one\nswitches completely."
			example = fmt.Sprintf("  fenced device %s worker-3 --level 2", sub.op)
		}
		cmd.AddCommand(powerCommand(g, "fenced device", sub.op, sub.short, long, example,
			func(cmd *cobra.Command, out *printer.Flags, node string, byHand *admin.ByHand) error {
				return runDevice(cmd, g, f, out, node, sub.op, byHand)
			}))
	}
	return cmd
}

// openPowerDevices loads the configuration and opens its power devices,
// as the fencer would.
func openPowerDevices(g *globals) (*config.Config, *admin.PowerDevices, error) {
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

// noPowerDevice is the usage error of a NODE the configuration gives no
// power device: a typo, as likely as not.
func noPowerDevice(cmd *cobra.Command, node string, cfg *config.Config) error {
	return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("%w %q: it has no power device in %s (no bmc entry, no topology levels)", admin.ErrUnknownNode, node, cfg.Source)}
}

func runDevice(cmd *cobra.Command, g *globals, f *deviceFlags, out *printer.Flags, node string, op admin.PowerOp, byHand *admin.ByHand) error {
	cfg, devs, err := openPowerDevices(g)
	if err != nil {
		return err
	}
	defer devs.Close()
	levels := devs.LevelCount(node)
	if levels == 0 {
		return noPowerDevice(cmd, node, cfg)
	}
	if f.level < 0 || f.level > levels {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("--level %d: node %s has levels 1 to %d", f.level, node, levels)}
	}
	if admin.Harmful(op) {
		done, err := g.allowPower(cmd, "fenced-device", byHand.About(node, op, admin.LevelsText(f.level), "fenced device"))
		if err != nil {
			return err
		}
		defer done()
	}
	res := devs.Use(cmd.Context(), node, f.level, op,
		admin.SwitchOptions{PowerWait: f.powerWait, Timeout: f.powerTimeout, Progress: g.stderr})
	if err := out.Print(g.stdout, res.Doc()); err != nil {
		return err
	}
	if err := res.Failure(); err != nil {
		return &silentError{err: err}
	}
	return nil
}

func newTopologyCommand(g *globals) *cobra.Command {
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
none (it could not be fenced automatically now), 2 usage error (wrong flags, a
NODE without a power device), 3 could not check (no or unreadable
configuration).`,
		Example:           "  fenced topology check\n  fenced topology check worker-3 worker-4 -o json",
		ValidArgsFunction: g.completeNodes(0, true),
	}
	out := outputFlags(check)
	check.RunE = func(cmd *cobra.Command, args []string) error {
		return runTopologyCheck(cmd, g, out, args)
	}
	cmd.AddCommand(check)
	return cmd
}

func runTopologyCheck(cmd *cobra.Command, g *globals, out *printer.Flags, nodes []string) error {
	cfg, devs, err := openPowerDevices(g)
	if err != nil {
		return err
	}
	defer devs.Close()
	for _, n := range nodes {
		if devs.LevelCount(n) == 0 {
			return noPowerDevice(cmd, n, cfg)
		}
	}
	if len(nodes) == 0 {
		nodes = admin.ConfiguredNodes(cfg)
	}
	if len(nodes) == 0 {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("%s names no nodes; name them on the command line", cfg.Source)}
	}
	check := devs.CheckTopology(cmd.Context(), nodes)
	if err := out.Print(g.stdout, check.Doc()); err != nil {
		return err
	}
	if err := check.Err(); err != nil {
		return &silentError{err: err}
	}
	return nil
}
