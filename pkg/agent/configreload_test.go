package agent

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/fencing/device"
)

// reconfigured records what the reloader hands the fencer.
type reconfigured struct{ got []fencing.Settings }

func (r *reconfigured) Reconfigure(s fencing.Settings) <-chan struct{} {
	r.got = append(r.got, s)
	done := make(chan struct{})
	close(done)
	return done
}

// reloadBed is a fencer's configuration file and a reloader of it, with
// the configuration the agent started with.
type reloadBed struct {
	path    string
	pw      string
	fencer  *reconfigured
	r       *configReloader
	events  *record.FakeRecorder
	started *config.Config
}

// configText is a fencer's configuration: gossip on port, node-a's BMC at
// addrA, node-b's at 10.0.0.2, and extra appended.
func (b *reloadBed) configText(port int, addrA, extra string) string {
	return fmt.Sprintf(`apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
clusterName: test
gossip: {port: %d}
bmc:
  defaults: {protocol: ipmi, username: fenced, passwordFile: %q}
  nodes:
    - {name: node-a, address: %s}
    - {name: node-b, address: 10.0.0.2}
%s`, port, b.pw, addrA, extra)
}

func newReloadBed(t *testing.T) *reloadBed {
	t.Helper()
	dir := t.TempDir()
	b := &reloadBed{path: filepath.Join(dir, "config.yaml"), pw: filepath.Join(dir, "pw"), fencer: &reconfigured{},
		events: record.NewFakeRecorder(100)}
	if err := os.WriteFile(b.pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.write(t, b.configText(8946, "10.0.0.1", ""))
	cfg, err := config.Load(b.path)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	inv, err := device.NewInventory(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inv.Close() })
	b.started = cfg
	b.r = newConfigReloader(cfg, inv, b.fencer, prometheus.NewRegistry(), log, log)
	b.r.eventsOn(b.events, nil, "node-fencer")
	return b
}

func (b *reloadBed) write(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(b.path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// events drains the Events recorded so far.
func (b *reloadBed) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-b.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestConfigReloader: each step writes the file (or not) and polls a
// number of times; then the fencer has been reconfigured so many times in
// all, the counters and gauges say so, and each Event has its reason.
func TestConfigReloader(t *testing.T) {
	type step struct {
		write       string // "" leaves the file as it is
		polls       int
		reconfigs   int // in all, so far
		applied     float64
		refused     float64
		success     float64
		restart     float64
		events      []string // reasons, in order
		endpointOfA string   // "" unchecked
	}
	bed := func(t *testing.T) *reloadBed { return newReloadBed(t) }
	moved := func(b *reloadBed) string { return b.configText(8946, "10.0.0.9", "") }
	invalid := func(*reloadBed) string {
		return "apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\nbmc: {nodes: [{name: node-a}]}\n"
	}
	tests := []struct {
		name  string
		steps []func(b *reloadBed) step
	}{
		{"the file it started with is not applied again", []func(*reloadBed) step{
			func(*reloadBed) step { return step{polls: 3, success: 1} },
		}},
		{"a moved BMC is applied at the second poll that reads it", []func(*reloadBed) step{
			func(b *reloadBed) step { return step{write: moved(b), polls: 1, success: 1} },
			func(*reloadBed) step {
				return step{polls: 1, reconfigs: 1, applied: 1, success: 1, events: []string{"ConfigurationReloaded"}, endpointOfA: "ipmi://10.0.0.9:623"}
			},
			func(*reloadBed) step { return step{polls: 3, reconfigs: 1, applied: 1, success: 1} },
		}},
		{"an invalid file is refused once and the configuration kept; a valid one is applied", []func(*reloadBed) step{
			func(b *reloadBed) step {
				return step{write: invalid(b), polls: 2, refused: 1, events: []string{"ConfigurationRefused"}}
			},
			func(*reloadBed) step { return step{polls: 5, refused: 1} },
			func(b *reloadBed) step {
				return step{write: moved(b), polls: 2, reconfigs: 1, applied: 1, refused: 1, success: 1,
					events: []string{"ConfigurationReloaded"}, endpointOfA: "ipmi://10.0.0.9:623"}
			},
		}},
		{"back to the file in force after a refused one: nothing applied", []func(*reloadBed) step{
			func(b *reloadBed) step {
				return step{write: invalid(b), polls: 2, refused: 1, events: []string{"ConfigurationRefused"}}
			},
			func(b *reloadBed) step {
				return step{write: b.configText(8946, "10.0.0.1", ""), polls: 2, refused: 1, success: 1}
			},
		}},
		{"a file seen once, half-written, is neither applied nor refused", []func(*reloadBed) step{
			func(b *reloadBed) step { return step{write: moved(b)[:60], polls: 1, success: 1} },
			func(b *reloadBed) step {
				return step{write: moved(b), polls: 2, reconfigs: 1, applied: 1, success: 1, events: []string{"ConfigurationReloaded"}}
			},
		}},
		{"a restart-only change is named, the rest applied", []func(*reloadBed) step{
			func(b *reloadBed) step {
				return step{write: b.configText(9000, "10.0.0.9", ""), polls: 2, reconfigs: 1, applied: 1, success: 1, restart: 1,
					events: []string{"ConfigurationReloaded", "ConfigurationNeedsRestart"}, endpointOfA: "ipmi://10.0.0.9:623"}
			},
			func(b *reloadBed) step {
				return step{write: b.configText(8946, "10.0.0.9", "policy: {dryRun: true}\n"), polls: 2, reconfigs: 2, applied: 2, success: 1,
					events: []string{"ConfigurationReloaded"}}
			},
		}},
		{"a file that cannot be read is refused at once", []func(*reloadBed) step{
			func(b *reloadBed) step {
				if err := os.Remove(b.path); err != nil {
					panic(err)
				}
				return step{polls: 3, refused: 1, events: []string{"ConfigurationRefused"}}
			},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bed(t)
			for i, mk := range tt.steps {
				s := mk(b)
				if s.write != "" {
					b.write(t, s.write)
				}
				for range s.polls {
					b.r.check()
				}
				m := b.r.metrics
				for what, got := range map[string][2]float64{
					"reconfigurations":                   {float64(len(b.fencer.got)), float64(s.reconfigs)},
					"fenced_config_reload_total applied": {testutil.ToFloat64(m.reloads.WithLabelValues(reloadApplied)), s.applied},
					"fenced_config_reload_total refused": {testutil.ToFloat64(m.reloads.WithLabelValues(reloadRefused)), s.refused},
					"fenced_config_last_reload_success":  {testutil.ToFloat64(m.success), s.success},
					"fenced_config_restart_pending":      {testutil.ToFloat64(m.restartPending), s.restart},
				} {
					if got[0] != got[1] {
						t.Errorf("step %d: %s = %v, want %v", i, what, got[0], got[1])
					}
				}
				var reasons []string
				for _, e := range b.drainEvents() {
					reasons = append(reasons, strings.Fields(e)[1])
				}
				if strings.Join(reasons, ",") != strings.Join(s.events, ",") {
					t.Errorf("step %d: Events %v, want %v", i, reasons, s.events)
				}
				if s.endpointOfA != "" {
					last := b.fencer.got[len(b.fencer.got)-1]
					ls := last.Inventory.Levels("node-a")
					if len(ls) != 1 || ls[0][0].Endpoint != s.endpointOfA {
						t.Errorf("step %d: node-a's levels %v, want its BMC at %s", i, ls, s.endpointOfA)
					}
				}
			}
		})
	}
}

// TestConfigReloaderKeepsUnchangedDrivers: a reload that moves node-a's
// BMC builds a driver for node-a only; node-b's is the one in use before.
func TestConfigReloaderKeepsUnchangedDrivers(t *testing.T) {
	b := newReloadBed(t)
	before := b.r.Inventory()
	b.write(t, b.configText(8946, "10.0.0.9", ""))
	b.r.check()
	b.r.check()
	after := b.r.Inventory()
	if after == before {
		t.Fatal("no new inventory")
	}
	for node, same := range map[string]bool{"node-a": false, "node-b": true} {
		x, _ := before.BMC(node)
		y, _ := after.BMC(node)
		if (x == y) != same {
			t.Errorf("%s: driver kept = %v, want %v", node, x == y, same)
		}
	}
}
