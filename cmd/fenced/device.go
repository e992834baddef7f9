package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
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
	pf.DurationVar(&f.powerTimeout, "power-timeout", config.DefaultPowerTimeout,
		"off/on/cycle: how long to wait for each plug to report the new state")
	pf.DurationVar(&f.powerWait, "power-wait", device.DefaultPowerWait,
		"off/on/cycle: pause after sending the request before the first status read")

	cmd.AddCommand(&cobra.Command{
		Use:     "status NODE",
		Short:   "Read every plug of every fencing level of a node",
		Example: "  fenced device status worker-3",
		Args:    exactlyOneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDevice(cmd, g, f, args[0], vocab.OpPowerStatus, device.ReadPlug)
		},
	})
	verify := func(action func(context.Context, device.BMC, device.VerifyOptions) (device.ActionResult, error)) device.PlugOp {
		return func(ctx context.Context, b device.BMC) (vocab.PowerState, error) {
			res, err := action(ctx, b, device.VerifyOptions{PowerWait: f.powerWait, Timeout: f.powerTimeout,
				Progress: device.ProgressPrinter(g.stderr, "  the device", 0)})
			return res.State, err
		}
	}
	for _, a := range []struct {
		use, op, short string
		do             device.PlugOp
	}{
		{"off", vocab.OpPowerOff, "Switch every plug of a level off and confirm each reads off", verify(device.PowerOffVerified)},
		{"on", vocab.OpPowerOn, "Switch every plug of a level on and confirm each reads on", verify(device.PowerOnVerified)},
		{"cycle", vocab.OpPowerCycle, "Switch every plug of a level off and on again, confirming each step", verify(device.PowerCycleVerified)},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   a.use + " NODE",
			Short: a.short,
			Long: a.short + ". Without --level the levels are tried in order until one\n" +
				"switches completely.\n\nThis bypasses every safety check of the fencer: it does what you ask.",
			Example: fmt.Sprintf("  fenced device %s worker-3 --level 2", a.use),
			Args:    exactlyOneNode,
			RunE: func(cmd *cobra.Command, args []string) error {
				return runDevice(cmd, g, f, args[0], a.op, a.do)
			},
		})
	}
	return cmd
}

// plugResult is one plug in the output of `fenced device` and
// `fenced topology check`.
type plugResult struct {
	Level      int    `json:"level"`
	Device     string `json:"device"`
	Plug       string `json:"plug,omitempty"`
	Endpoint   string `json:"endpoint"`
	Power      string `json:"power"`
	SystemGUID string `json:"systemGUID,omitempty"`
	ElapsedMS  int64  `json:"elapsedMs"`
	Error      string `json:"error,omitempty"`
	ErrorKind  string `json:"errorKind,omitempty"`
}

// deviceResult is the -o json output of `fenced device`.
type deviceResult struct {
	Node   string       `json:"node"`
	Action string       `json:"action"`
	OK     bool         `json:"ok"`
	Plugs  []plugResult `json:"plugs"`
	// Decision is what the levels say together (core.CombineLevels) for a
	// status read, or which level was switched.
	Decision string `json:"decision"`
}

// loadInventory checks the output format, then loads the configuration
// and builds its power devices, as the fencer would.
func loadInventory(cmd *cobra.Command, g *globals, output string) (*config.Config, *device.Inventory, error) {
	if output != "text" && output != "json" {
		return nil, nil, &usageError{command: cmd.CommandPath(), err: fmt.Errorf("--output %q: want text or json", output)}
	}
	cfg, err := g.loadConfig(true)
	if err != nil {
		return nil, nil, err
	}
	inv, err := device.NewInventory(cfg, g.log)
	if err != nil {
		return nil, nil, err
	}
	return cfg, inv, nil
}

func runDevice(cmd *cobra.Command, g *globals, f *deviceFlags, node, op string, do device.PlugOp) error {
	cfg, inv, err := loadInventory(cmd, g, f.output)
	if err != nil {
		return err
	}
	defer inv.Close()
	levels := inv.Levels(node)
	if len(levels) == 0 {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("node %q has no power device in %s (no bmc entry, no topology levels)", node, cfg.Source)}
	}
	if f.level < 0 || f.level > len(levels) {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("--level %d: node %s has levels 1 to %d", f.level, node, len(levels))}
	}
	res := deviceResult{Node: node, Action: op}
	var reads []core.LevelRead
	for i, plugs := range levels {
		if f.level != 0 && i+1 != f.level {
			continue
		}
		lr := readLevelWithProgress(cmd.Context(), g, node, i+1, plugs, op, do, &res.Plugs)
		reads = append(reads, lr)
		if op != vocab.OpPowerStatus && lr.Decides() {
			break // switched a whole level: done
		}
	}
	r, fail := core.CombineLevels(reads)
	switch {
	case op == vocab.OpPowerStatus && r != nil:
		res.OK, res.Decision = true, "power "+string(r.Power)+" ("+decidingLevel(r)+" decides)"
	case r != nil:
		res.OK, res.Decision = true, fmt.Sprintf("%s done on %s", op, decidingLevel(r))
	default:
		res.Decision = fail.Message
	}
	if err := printDeviceResult(g.stdout, f.output, res); err != nil {
		return err
	}
	if !res.OK {
		return &silentError{err: errors.New(res.Decision)}
	}
	return nil
}

// decidingLevel names the level a combined reading comes from.
func decidingLevel(r *core.Reading) string {
	if r.Level == 0 {
		return "level 1, the BMC"
	}
	return fmt.Sprintf("level %d", r.Level)
}

// readLevelWithProgress runs one level and appends its plugs' results.
// Agents can take tens of seconds: say what is being asked, on stderr.
func readLevelWithProgress(ctx context.Context, g *globals, node string, level int, plugs []device.Plug, op string, do device.PlugOp, out *[]plugResult) core.LevelRead {
	names := make([]string, len(plugs))
	for i, p := range plugs {
		names[i] = plugLabel(p.Device, p.Plug)
	}
	fmt.Fprintf(g.stderr, "%s: level %d: %s %s …\n", node, level, op, strings.Join(names, ", "))
	defer stillWaiting(g.stderr, fmt.Sprintf("%s: level %d: %s", node, level, op), 10*time.Second)()
	elapsed := map[string]time.Duration{}
	var mu sync.Mutex
	lr := device.OnLevel(ctx, level, plugs, op, do, time.Now, func(p device.Plug, _ *core.Reading, _ error, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		elapsed[plugLabel(p.Device, p.Plug)] = d
	})
	for i, pr := range lr.Plugs {
		res := plugResult{Level: level, Device: pr.Device, Plug: pr.Plug, Endpoint: plugs[i].Endpoint,
			Power: string(vocab.PowerUnknown), ElapsedMS: elapsed[plugLabel(pr.Device, pr.Plug)].Milliseconds()}
		if pr.Reading != nil {
			res.Power, res.SystemGUID = string(pr.Reading.Power), pr.Reading.SystemGUID
		}
		if pr.Failure != nil {
			res.Error, res.ErrorKind = pr.Failure.Message, string(pr.Failure.Kind)
		}
		*out = append(*out, res)
	}
	return lr
}

func plugLabel(device, plug string) string {
	if plug == "" {
		return device
	}
	return device + ":" + plug
}

func printDeviceResult(w io.Writer, output string, res deviceResult) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEVEL\tDEVICE\tPLUG\tENDPOINT\tPOWER\tTIME\tERROR")
	for _, p := range res.Plugs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Level, p.Device, dash(p.Plug), p.Endpoint, p.Power,
			(time.Duration(p.ElapsedMS) * time.Millisecond).Round(10*time.Millisecond), dash(oneLine(p.Error)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s: %s\n", res.Node, res.Decision)
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a table row one line high.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
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

// levelCheck is one row of `fenced topology check`.
type levelCheck struct {
	Node  string       `json:"node"`
	Level int          `json:"level"`
	OK    bool         `json:"ok"`
	Power string       `json:"power,omitempty"`
	Plugs []plugResult `json:"plugs"`
}

func runTopologyCheck(cmd *cobra.Command, g *globals, output string, nodes []string) error {
	cfg, inv, err := loadInventory(cmd, g, output)
	if err != nil {
		return err
	}
	defer inv.Close()
	if len(nodes) == 0 {
		nodes = configuredNodes(cfg)
	}
	if len(nodes) == 0 {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("%s names no nodes; name them on the command line", cfg.Source)}
	}
	var rows []levelCheck
	var unfenceable []string
	for _, node := range nodes {
		levels := inv.Levels(node)
		ready := 0
		for i, plugs := range levels {
			var plugsOut []plugResult
			lr := readLevelWithProgress(cmd.Context(), g, node, i+1, plugs, vocab.OpPowerStatus, device.ReadPlug, &plugsOut)
			row := levelCheck{Node: node, Level: i + 1, OK: lr.Decides(), Plugs: plugsOut}
			if r, _ := core.CombineLevels([]core.LevelRead{lr}); r != nil {
				row.Power = string(r.Power)
				ready++
			}
			rows = append(rows, row)
		}
		if ready == 0 {
			unfenceable = append(unfenceable, node)
		}
	}
	if output == "json" {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tLEVEL\tRESULT\tPLUGS")
		for _, r := range rows {
			result := "power " + r.Power
			if !r.OK {
				result = "CANNOT READ"
			}
			var plugs []string
			for _, p := range r.Plugs {
				s := plugLabel(p.Device, p.Plug) + "=" + p.Power
				if p.Error != "" {
					s += " (" + p.ErrorKind + ": " + oneLine(p.Error) + ")"
				}
				plugs = append(plugs, s)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Node, r.Level, result, strings.Join(plugs, ", "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, n := range unfenceable {
			fmt.Fprintf(g.stdout, "%s: no fencing level answers: it cannot be fenced automatically now\n", n)
		}
	}
	if len(unfenceable) > 0 {
		return &silentError{err: fmt.Errorf("%d node(s) cannot be fenced automatically: %s", len(unfenceable), strings.Join(unfenceable, ", "))}
	}
	return nil
}

// configuredNodes are the nodes the configuration names: BMC entries,
// topology nodes and the nodes of the fence devices' plugs maps.
func configuredNodes(cfg *config.Config) []string {
	var out []string
	for _, b := range cfg.BMCs {
		out = append(out, b.Node)
	}
	for n := range cfg.Topology.Nodes {
		out = append(out, n)
	}
	for _, d := range cfg.Devices {
		for n := range d.Plugs {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// stillWaiting prints "<what>: still waiting (20s)" every `every` until the
// returned stop is called: fence agents may take a minute, and a silent
// terminal looks hung.
func stillWaiting(w io.Writer, what string, every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "%s: still waiting (%s)\n", what, time.Since(start).Round(time.Second))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
