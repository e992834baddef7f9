package device

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

// Plug is one device and plug of a node's fencing level, with the driver
// that reads and switches it.
type Plug struct {
	// Device is the device's name (vocab.DeviceBMC for the node's BMC);
	// Plug the outlet, VM or port ("" for a BMC).
	Device, Plug string
	// Driver is nil when the level names a device the node lacks (a "bmc"
	// level for a node without one): reading it is an error, never off.
	Driver BMC
	// Endpoint names the device in messages and evidence.
	Endpoint string
	// Key names the device itself, whichever plug: "bmc:<node>" for a BMC,
	// the declared name for a fence device (one PDU, many plugs).
	Key string
	// Monitor checks that the device answers and accepts the credentials
	// (a fence agent's monitor action; a BMC's power read), without
	// switching anything. Nil with Driver.
	Monitor func(context.Context) error
	// source is the driver of the device itself (the BMC, the
	// *FenceAgent), whichever plug: what Same compares.
	source any
}

// Same reports whether p and q are the same plug of the same device built
// from the same settings: an inventory rebuilt from a reloaded
// configuration keeps the drivers of unchanged devices, so a plug whose
// device changed is not Same as before, even at the same address.
func (p Plug) Same(q Plug) bool {
	return p.Device == q.Device && p.Plug == q.Plug && p.Key == q.Key && p.Endpoint == q.Endpoint && p.source == q.source
}

// SameLevels reports whether a and b are the same levels of the same
// plugs (Same).
func SameLevels(a, b [][]Plug) bool {
	return slices.EqualFunc(a, b, func(x, y []Plug) bool { return slices.EqualFunc(x, y, Plug.Same) })
}

// fenceDeviceSetupTimeout bounds reading every fence agent's metadata at
// start-up (a local process each, no network).
const fenceDeviceSetupTimeout = 30 * time.Second

// newFenceDevices builds one fence-agent device per declaration, each
// checked against its agent's metadata.
func newFenceDevices(devices map[string]config.FenceDevice, log *slog.Logger) (map[string]*FenceAgent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fenceDeviceSetupTimeout)
	defer cancel()
	names := make([]string, 0, len(devices))
	for n := range devices {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make(map[string]*FenceAgent, len(devices))
	for _, name := range names {
		d := devices[name]
		secrets := make(map[string]func() (string, error), len(d.SecretOptions))
		for opt, src := range d.SecretOptions {
			warnPasswordFile(src, log)
			secrets[opt] = src.Read
		}
		a, err := NewFenceAgent(ctx, FenceAgentOptions{
			DriverOptions: DriverOptions{Node: name, Timeout: d.Timeout},
			Agent:         d.Agent, Options: d.Options, Secrets: secrets,
		})
		if err != nil {
			return nil, fmt.Errorf("fence device %s: %w", name, err)
		}
		out[name] = a
	}
	return out, nil
}

// Levels returns node's power device levels in order, each plug with its
// driver; nil when the node has none. Without a topology in the
// configuration a node's one level is its BMC. A watchdog level is no
// power device: it is not among them (WatchdogLevel).
func (i *Inventory) Levels(node string) [][]Plug {
	var levels []config.Level
	if i.levels != nil {
		levels = i.levels(node)
	} else if _, ok := i.bmcs[node]; ok {
		levels = []config.Level{{{Device: vocab.DeviceBMC}}}
	}
	if n := i.WatchdogLevel(node); n > 0 {
		levels = levels[:n-1] // the last level (config validates it)
	}
	if len(levels) == 0 {
		return nil
	}
	out := make([][]Plug, 0, len(levels))
	for _, l := range levels {
		plugs := make([]Plug, 0, len(l))
		for _, r := range l {
			p := Plug{Device: r.Device, Plug: r.Plug}
			if r.Device == vocab.DeviceBMC {
				if b, ok := i.bmcs[node]; ok {
					p = BMCPlug(node, b, i.endpoints[node])
					p.Plug = r.Plug
				} else {
					p.Key, p.Endpoint = vocab.DeviceBMC+":"+node, "bmc (none configured for "+node+")"
				}
			} else if a, ok := i.agents[r.Device]; ok {
				p.Key = r.Device
				p.Driver, p.Endpoint, p.Monitor, p.source = a.Plug(node, r.Plug), a.endpoint+"/"+r.Plug, a.Monitor, a
			} else {
				p.Key = r.Device
				p.Endpoint = r.Device + " (not declared)"
			}
			plugs = append(plugs, p)
		}
		out = append(out, plugs)
	}
	return out
}

// BMCPlug is the one plug of node's BMC level: b, named by endpoint, read
// for its monitor.
func BMCPlug(node string, b BMC, endpoint string) Plug {
	return Plug{Device: vocab.DeviceBMC, Key: vocab.DeviceBMC + ":" + node, Driver: b, Endpoint: endpoint, source: b,
		Monitor: func(ctx context.Context) error { _, err := b.PowerState(ctx); return err }}
}

// WatchdogLevel is the number (from 1) of node's watchdog level, after its
// power device levels; 0 when it has none.
func (i *Inventory) WatchdogLevel(node string) int {
	if i.watchdogLevel == nil {
		return 0
	}
	return i.watchdogLevel(node)
}

// Fenceable reports whether node has at least one power device level.
func (i *Inventory) Fenceable(node string) bool { return len(i.Levels(node)) > 0 }

// PlugOp is one operation on one plug's driver: a status read or a
// verified switch, returning the state it ends in.
type PlugOp func(context.Context, BMC) (vocab.PowerState, error)

// ReadPlug is the PlugOp of a status read.
func ReadPlug(ctx context.Context, b BMC) (vocab.PowerState, error) { return b.PowerState(ctx) }

// OnLevel runs do (op names it in failures) on every plug of one level in
// parallel and returns what each gave: a reading dated with its answer
// (and its system GUID where the device has one) or a failure. A plug
// that answers its power but fails its GUID is not trusted for a status
// read. done, when set, sees each plug's outcome and duration before it
// is returned, e.g. to stamp the reading or count it.
func OnLevel(ctx context.Context, level int, plugs []Plug, op string, do PlugOp, now func() time.Time,
	done func(p Plug, r *core.Reading, err error, elapsed time.Duration)) core.LevelRead {
	lr := core.LevelRead{Level: level, Plugs: make([]core.PlugRead, len(plugs))}
	var wg sync.WaitGroup
	for i, p := range plugs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr := core.PlugRead{Device: p.Device, Plug: p.Plug}
			start := now()
			var err error
			if p.Driver == nil {
				err = fmt.Errorf("%s: not configured", p.Endpoint)
			} else {
				var state vocab.PowerState
				if state, err = do(ctx, p.Driver); err == nil {
					r := &core.Reading{Power: state, At: now(), SentAt: start, Endpoint: p.Endpoint}
					if guid, gerr := p.Driver.SystemGUID(ctx); gerr == nil {
						r.SystemGUID = guid
					} else if KindOf(gerr) != vocab.KindNotSupported && op == vocab.OpPowerStatus {
						err = gerr
					}
					if err == nil {
						pr.Reading = r
					}
				}
			}
			if err != nil {
				kind := KindOf(err)
				if kind == "" {
					kind = vocab.KindBMC
				}
				pr.Failure = &core.Failure{Op: op, Kind: kind, Message: err.Error(), At: now()}
			}
			if done != nil {
				done(p, pr.Reading, err, now().Sub(start))
			}
			lr.Plugs[i] = pr
		}()
	}
	wg.Wait()
	return lr
}
