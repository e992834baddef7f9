package admin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/vocab"
)

// PowerDevices are the power devices of a configuration, opened as the
// fencer opens them, for `fenced device` and `fenced topology check`:
// every plug of every fencing level of a node, read or switched by hand.
type PowerDevices struct {
	levels   levelSource
	close    func() error
	progress io.Writer
}

// OpenPowerDevices builds cfg's power devices (drivers do not contact
// their device until used). progress receives the lines that say which
// level is being asked, and that it is still being waited for: fence
// agents can take a minute. Close it when done.
func OpenPowerDevices(cfg *config.Config, log *slog.Logger, progress io.Writer) (*PowerDevices, error) {
	inv, err := device.NewInventory(cfg, log)
	if err != nil {
		return nil, err
	}
	return &PowerDevices{levels: inv, close: inv.Close, progress: progress}, nil
}

// Close closes every driver.
func (d *PowerDevices) Close() error { return d.close() }

// LevelCount is how many fencing levels node has (0: no power device).
func (d *PowerDevices) LevelCount(node string) int { return len(d.levels.Levels(node)) }

// PlugResult is one plug in the output of `fenced device` and
// `fenced topology check`.
type PlugResult struct {
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

// DeviceResult is what `fenced device` did, and its -o json output.
type DeviceResult struct {
	Node   string       `json:"node"`
	Action string       `json:"action"`
	OK     bool         `json:"ok"`
	Plugs  []PlugResult `json:"plugs"`
	// Decision is what the levels say together (core.CombineLevels) for a
	// status read, or which level was switched.
	Decision string `json:"decision"`
}

// Use does op on node's fencing levels: a status read of every level (or
// only level, from 1, when not 0), saying which level decides and what; or
// a verified switch of every plug of one level: level, or else the first
// that switches completely. It bypasses every safety check of the fencer.
// The caller checks level against LevelCount.
func (d *PowerDevices) Use(ctx context.Context, node string, level int, op PowerOp, opts SwitchOptions) DeviceResult {
	do := device.ReadPlug
	if verified := op.verified(); verified != nil {
		do = func(ctx context.Context, b device.BMC) (vocab.PowerState, error) {
			res, err := verified(ctx, b, opts.verify("  the device"))
			return res.State, err
		}
	}
	res := DeviceResult{Node: node, Action: op.coreOp()}
	var reads []core.LevelRead
	for i, plugs := range d.levels.Levels(node) {
		if level != 0 && i+1 != level {
			continue
		}
		lr, plugsOut := d.onLevel(ctx, node, i+1, plugs, op.coreOp(), do)
		res.Plugs = append(res.Plugs, plugsOut...)
		reads = append(reads, lr)
		if op != PowerStatus && lr.Decides() {
			break // switched a whole level: done
		}
	}
	r, fail := core.CombineLevels(reads)
	switch {
	case op == PowerStatus && r != nil:
		res.OK, res.Decision = true, "power "+string(r.Power)+" ("+decidingLevel(r)+" decides)"
	case r != nil:
		res.OK, res.Decision = true, fmt.Sprintf("%s done on %s", res.Action, decidingLevel(r))
	default:
		res.Decision = fail.Message
	}
	return res
}

// decidingLevel names the level a combined reading comes from.
func decidingLevel(r *core.Reading) string {
	if r.Level == 0 {
		return "level 1, the BMC"
	}
	return fmt.Sprintf("level %d", r.Level)
}

// onLevel runs one level and returns its plugs' results too. Agents can
// take tens of seconds: it says what is being asked, on progress.
func (d *PowerDevices) onLevel(ctx context.Context, node string, level int, plugs []device.Plug, op string, do device.PlugOp) (core.LevelRead, []PlugResult) {
	names := make([]string, len(plugs))
	for i, p := range plugs {
		names[i] = plugLabel(p.Device, p.Plug)
	}
	fmt.Fprintf(d.progress, "%s: level %d: %s %s …\n", node, level, op, strings.Join(names, ", "))
	defer stillWaiting(d.progress, fmt.Sprintf("%s: level %d: %s", node, level, op), 10*time.Second)()
	elapsed := map[string]time.Duration{}
	var mu sync.Mutex
	lr := device.OnLevel(ctx, level, plugs, op, do, time.Now, func(p device.Plug, _ *core.Reading, _ error, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		elapsed[plugLabel(p.Device, p.Plug)] = d
	})
	out := make([]PlugResult, 0, len(lr.Plugs))
	for i, pr := range lr.Plugs {
		res := PlugResult{Level: level, Device: pr.Device, Plug: pr.Plug, Endpoint: plugs[i].Endpoint,
			Power: string(vocab.PowerUnknown), ElapsedMS: elapsed[plugLabel(pr.Device, pr.Plug)].Milliseconds()}
		if pr.Reading != nil {
			res.Power, res.SystemGUID = string(pr.Reading.Power), pr.Reading.SystemGUID
		}
		if pr.Failure != nil {
			res.Error, res.ErrorKind = pr.Failure.Message, string(pr.Failure.Kind)
		}
		out = append(out, res)
	}
	return lr, out
}

// plugLabel names a plug as the commands print it: "pdu-a:3", or the
// device alone ("bmc").
func plugLabel(device, plug string) string {
	if plug == "" {
		return device
	}
	return device + ":" + plug
}

// Doc is r as the printers print it (package printer): one row per plug;
// -o name prints node/NAME.
func (r DeviceResult) Doc() printer.Doc {
	return printer.Doc{Kind: "DeviceResult", Value: r, Rows: "plugs", NameKind: "Node", Names: []string{r.Node},
		Text: r.writeTable}
}

// writeTable prints r's plugs as a table followed by the decision.
func (r DeviceResult) writeTable(w io.Writer, o printer.TextOptions) error {
	tw := o.Table(w, "LEVEL", "DEVICE", "PLUG", "ENDPOINT", "POWER", "TIME", "ERROR")
	for _, p := range r.Plugs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Level, p.Device, dash(p.Plug), p.Endpoint, p.Power,
			millis(p.ElapsedMS).Round(10*time.Millisecond), dash(oneLine(p.Error)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s: %s\n", r.Node, r.Decision)
	return err
}

// oneLine keeps a table row one line high.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// LevelCheck is one row of `fenced topology check`: one node's level.
type LevelCheck struct {
	Node  string       `json:"node"`
	Level int          `json:"level"`
	OK    bool         `json:"ok"`
	Power string       `json:"power,omitempty"`
	Plugs []PlugResult `json:"plugs"`
}

// TopologyCheck is what `fenced topology check` found.
type TopologyCheck struct {
	Levels []LevelCheck
	// Unfenceable are the nodes none of whose levels answers completely:
	// they could not be fenced automatically now.
	Unfenceable []string
}

// CheckTopology reads every plug of every fencing level of each node;
// nothing is switched.
func (d *PowerDevices) CheckTopology(ctx context.Context, nodes []string) TopologyCheck {
	var c TopologyCheck
	for _, node := range nodes {
		ready := 0
		for i, plugs := range d.levels.Levels(node) {
			lr, plugsOut := d.onLevel(ctx, node, i+1, plugs, vocab.OpPowerStatus, device.ReadPlug)
			row := LevelCheck{Node: node, Level: i + 1, OK: lr.Decides(), Plugs: plugsOut}
			if r, _ := core.CombineLevels([]core.LevelRead{lr}); r != nil {
				row.Power = string(r.Power)
				ready++
			}
			c.Levels = append(c.Levels, row)
		}
		if ready == 0 {
			c.Unfenceable = append(c.Unfenceable, node)
		}
	}
	return c
}

// Err is the failure of a check that found unfenceable nodes, else nil.
func (c TopologyCheck) Err() error {
	if len(c.Unfenceable) == 0 {
		return nil
	}
	return fmt.Errorf("%d node(s) cannot be fenced automatically: %s", len(c.Unfenceable), strings.Join(c.Unfenceable, ", "))
}

// Doc is c as the printers print it (package printer): its rows, one per
// node and level, a list as -o json has always printed it; -o name prints
// node/NAME for every node checked.
func (c TopologyCheck) Doc() printer.Doc {
	var names []string
	for _, l := range c.Levels {
		if !slices.Contains(names, l.Node) {
			names = append(names, l.Node)
		}
	}
	return printer.Doc{Kind: "TopologyCheck", Value: c.Levels, NameKind: "Node", Names: names, Text: c.writeTable}
}

// writeTable prints c's rows as a table, one row per node and level,
// followed by a line for each unfenceable node.
func (c TopologyCheck) writeTable(w io.Writer, o printer.TextOptions) error {
	tw := o.Table(w, "NODE", "LEVEL", "RESULT", "PLUGS")
	for _, r := range c.Levels {
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
	for _, n := range c.Unfenceable {
		fmt.Fprintf(w, "%s: no fencing level answers: it cannot be fenced automatically now\n", n)
	}
	return nil
}

// ConfiguredNodes are the nodes the configuration names: BMC entries,
// topology nodes and the nodes of the fence devices' plugs maps.
func ConfiguredNodes(cfg *config.Config) []string {
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

// LevelsText names, for the Event of a power action by hand, the levels
// `fenced device --level level` switches.
func LevelsText(level int) string {
	if level > 0 {
		return fmt.Sprintf("fencing level %d", level)
	}
	return "the first of its fencing levels that switches completely"
}
