package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// writeAgent creates an executable stand-in for a fence agent (the
// configuration only checks that it exists and is executable).
func writeAgent(t *testing.T, name string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// topologyConfig is a cluster of three nodes with BMCs, two PDUs feeding
// each node once, and node w-3 with its own levels.
func topologyConfig(t *testing.T) string {
	t.Helper()
	pw := writePassword(t, "s3cret\n")
	agent := writeAgent(t, "fence_apc_snmp", 0o755)
	return header + `
bmc:
  defaults: {protocol: ipmi, username: fenced, passwordFile: ` + pw + `}
  nodes:
    - {name: w-1, address: 198.18.0.11}
    - {name: w-2, address: 198.18.0.12}
    - {name: w-3, address: 198.18.0.13}
fenceDevices:
  - name: pdu-a
    agent: ` + agent + `
    options: {ip: 198.18.0.50, snmp_version: "2c"}
    secretOptions: {community: ` + pw + `}
    plugs: {w-1: "1", w-2: "2", w-3: "3"}
  - name: pdu-b
    agent: ` + agent + `
    options: {ip: 198.18.0.51}
    secretOptions: {community: ` + pw + `}
    plugs: {w-1: "1", w-2: "2"}
    timeout: 10s
topology:
  defaults:
    - [bmc]
    - [pdu-a, pdu-b]
  nodes:
    - name: w-3
      levels:
        - [pdu-a]
        - [{device: pdu-b, plug: "8"}, bmc]
`
}

func TestTopologyLevels(t *testing.T) {
	cfg, err := Parse([]byte(topologyConfig(t)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		node string
		want []Level
	}{
		{"w-1", []Level{{{Device: "bmc"}}, {{"pdu-a", "1"}, {"pdu-b", "1"}}}},
		{"w-2", []Level{{{Device: "bmc"}}, {{"pdu-a", "2"}, {"pdu-b", "2"}}}},
		{"w-3", []Level{{{"pdu-a", "3"}}, {{"pdu-b", "8"}, {Device: "bmc"}}}},
		// Not in any plugs map: the defaults with the node name as plug
		// (the runtime then finds no such outlet: that level gives no
		// evidence, it is never read as off).
		{"w-9", []Level{{{Device: "bmc"}}, {{"pdu-a", "w-9"}, {"pdu-b", "w-9"}}}},
	}
	for _, c := range cases {
		if got := cfg.Levels(c.node); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Levels(%s) = %v, want %v", c.node, got, c.want)
		}
	}
	if d := cfg.Devices["pdu-b"]; d.Timeout.String() != "10s" || d.SecretOptions["community"].File == "" {
		t.Errorf("pdu-b resolved as %+v", d)
	}
	if d := cfg.Devices["pdu-a"]; d.Timeout != 0 {
		t.Errorf("pdu-a timeout %s, want unset (the device package's default)", d.Timeout)
	}
}

// TestTopologyAbsentKeepsBMCOnly: a configuration written before fence
// topology existed means what it meant: one level, the node's BMC.
func TestTopologyAbsentKeepsBMCOnly(t *testing.T) {
	pw := writePassword(t, "pw")
	cfg, err := Parse([]byte(header+`
bmc:
  defaults: {protocol: ipmi, username: fenced, passwordFile: `+pw+`}
  nodes: [{name: w-1, address: 198.18.0.11}]
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Levels("w-1"), []Level{{{Device: DeviceBMC}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Levels(w-1) = %v, want %v", got, want)
	}
	if got := cfg.Levels("w-2"); got != nil {
		t.Errorf("a node without BMC or topology has levels %v; want none", got)
	}
}

func TestTopologyValidation(t *testing.T) {
	pw := writePassword(t, "pw")
	agent := writeAgent(t, "fence_x", 0o755)
	notExec := writeAgent(t, "fence_y", 0o644)
	bmc := `
bmc:
  defaults: {protocol: ipmi, username: fenced, passwordFile: ` + pw + `}
  nodes: [{name: w-1, address: 198.18.0.11}, {name: w-2, address: 198.18.0.12}]
`
	dev := func(extra string) string {
		return "fenceDevices:\n  - {name: pdu, agent: " + agent + extra + "}\n"
	}
	cases := []struct {
		name, yaml string
		want       []string // every one must appear in the error
	}{
		{"unknown device", dev("") + "topology: {defaults: [[bmc], [pdu-x]]}",
			[]string{"topology.defaults[1][0].device: unknown device \"pdu-x\""}},
		{"empty level", dev("") + "topology: {nodes: [{name: w-1, levels: [[bmc], []]}]}",
			[]string{"topology.nodes[0].levels[1] (w-1)", "empty level"}},
		{"node without levels", dev("") + "topology: {nodes: [{name: w-1, levels: []}]}",
			[]string{"topology.nodes[0].levels (w-1): required"}},
		{"bmc level for a node without BMC", dev("") + "topology: {nodes: [{name: w-7, levels: [[bmc]]}]}",
			[]string{"node w-7 has no entry in the bmc section"}},
		{"missing plug", dev(`, plugs: {w-1: "1"}`) + "topology: {nodes: [{name: w-2, levels: [[pdu]]}]}",
			[]string{"line 9: topology.nodes[0].levels[0][0].plug (w-2): device pdu has a plugs map without node w-2"}},
		{"agent not found", "fenceDevices: [{name: pdu, agent: fence_does_not_exist}]\n",
			[]string{"fenceDevices[0].agent (pdu): fence agent \"fence_does_not_exist\" not found", "apt install fence-agents"}},
		{"agent not executable", "fenceDevices: [{name: pdu, agent: " + notExec + "}]\n",
			[]string{"fenceDevices[0].agent (pdu): " + notExec + " is not an executable file"}},
		{"relative agent path", "fenceDevices: [{name: pdu, agent: ./fence_x}]\n",
			[]string{"give a name"}},
		{"one plug two nodes in the map", dev(`, plugs: {w-1: "4", w-2: "4"}`),
			[]string{`plug "4" feeds both w-1 and w-2`, "sharedPlugs: true"}},
		{"one plug two nodes in levels", dev("") +
			`topology: {nodes: [{name: w-1, levels: [[{device: pdu, plug: "4"}]]}, {name: w-2, levels: [[{device: pdu, plug: "4"}]]}]}`,
			[]string{"pdu:4 also feeds w-1"}},
		{"unreadable secret", dev(`, secretOptions: {password: /nonexistent/pw}`),
			[]string{"secretOptions.password"}},
		{"reserved name", "fenceDevices: [{name: bmc, agent: " + agent + "}]\n",
			[]string{`"bmc" is reserved`}},
		{"duplicate device", "fenceDevices: [{name: pdu, agent: " + agent + "}, {name: pdu, agent: " + agent + "}]\n",
			[]string{`duplicate device "pdu"`}},
		{"unknown field in a level entry", dev("") + `topology: {defaults: [[{device: pdu, plgu: "3"}]]}`,
			[]string{"topology.defaults[0][0].plgu: unknown field; did you mean plug?"}},
		{"unknown field in a device", "fenceDevices: [{name: pdu, agent: " + agent + ", plug: 3}]\n",
			[]string{"fenceDevices[0].plug: unknown field; did you mean plugs?"}},
		{"bmc with a plug", dev("") + `topology: {defaults: [[{device: bmc, plug: "1"}]]}`,
			[]string{"the bmc has no plugs"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(header+bmc+c.yaml), "test.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestTopologySharedPlugs: a plug declared shared may feed several nodes.
func TestTopologySharedPlugs(t *testing.T) {
	pw := writePassword(t, "pw")
	agent := writeAgent(t, "fence_x", 0o755)
	_, err := Parse([]byte(header+`
bmc:
  defaults: {protocol: ipmi, username: fenced, passwordFile: `+pw+`}
  nodes: [{name: w-1, address: 198.18.0.11}, {name: w-2, address: 198.18.0.12}]
fenceDevices:
  - {name: chassis, agent: `+agent+`, sharedPlugs: true, plugs: {w-1: "feed-1", w-2: "feed-1"}}
topology: {defaults: [[bmc], [chassis]]}
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
}

// TestWatchdogLevel: a node whose levels end in [watchdog] has the
// watchdog level, numbered after its power devices; the watchdog section
// takes its defaults, or what it sets.
func TestWatchdogLevel(t *testing.T) {
	pw := writePassword(t, "s3cret\n")
	cfg, err := Parse([]byte(header+`
bmc:
  nodes:
    - {name: w-1, protocol: ipmi, address: 198.18.0.11, username: fenced, passwordFile: `+pw+`}
    - {name: w-2, protocol: ipmi, address: 198.18.0.12, username: fenced, passwordFile: `+pw+`}
topology:
  defaults:
    - [watchdog]
  nodes:
    - name: w-1
      levels: [[bmc], [watchdog]]
    - name: w-2
      levels: [[bmc]]
watchdog:
  device: /dev/watchdog0
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]int{"w-1": 2, "w-2": 0, "homelab-1": 1} {
		if got := cfg.WatchdogLevel(node); got != want {
			t.Errorf("WatchdogLevel(%s) = %d, want %d", node, got, want)
		}
	}
	if w := cfg.Watchdog; w.Device != "/dev/watchdog0" || w.Timeout != 10*time.Second || w.Confirm != 30*time.Second || w.AllowSoftware ||
		cfg.Policy.WatchdogOrderAfter != 12*time.Second || !cfg.CanFence() {
		t.Errorf("watchdog section %+v, orderAfter %s, can fence %v", w, cfg.Policy.WatchdogOrderAfter, cfg.CanFence())
	}

	// A cluster with nothing but the watchdog level fences.
	only, err := Parse([]byte(header+`
topology:
  defaults: [[watchdog]]
watchdog: {device: "unix:/run/fenced/watchdog.sock", timeout: 5s, confirm: 1m, allowSoftware: true, orderAfter: 20s}
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if w := only.Watchdog; !only.CanFence() || only.WatchdogLevel("any") != 1 || w.Timeout != 5*time.Second || w.Confirm != time.Minute ||
		!w.AllowSoftware || only.Policy.WatchdogOrderAfter != 20*time.Second {
		t.Errorf("watchdog only: %+v, orderAfter %s", w, only.Policy.WatchdogOrderAfter)
	}
}

// TestArmsWatchdog: an observer's configuration (no power device, no
// topology) arms the device it names on every node it runs on; a fencer's
// only on the nodes its topology gives the watchdog level; none without a
// device.
func TestArmsWatchdog(t *testing.T) {
	pw := writePassword(t, "s3cret\n")
	fencer := header + `
bmc:
  nodes:
    - {name: cp-1, protocol: ipmi, address: 198.18.0.11, username: fenced, passwordFile: ` + pw + `}
topology:
  defaults: [[watchdog]]
  nodes: [{name: cp-1, levels: [[bmc]]}]
watchdog: {device: /dev/watchdog0}
`
	for _, tc := range []struct {
		name, text string
		arms       map[string]bool
	}{
		{"observer with a device", header + "watchdog: {device: /dev/watchdog0}\n", map[string]bool{"w-1": true, "cp-1": true}},
		{"observer without one", header, map[string]bool{"w-1": false}},
		{"fencer: by its levels", fencer, map[string]bool{"w-1": true, "cp-1": false}},
		{"fencer without a watchdog level", header + `
bmc:
  nodes:
    - {name: cp-1, protocol: ipmi, address: 198.18.0.11, username: fenced, passwordFile: ` + pw + `}
watchdog: {device: /dev/watchdog0}
`, map[string]bool{"w-1": false, "cp-1": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.text), "test.yaml")
			if err != nil {
				t.Fatal(err)
			}
			for node, want := range tc.arms {
				if got := cfg.ArmsWatchdog(node); got != want {
					t.Errorf("ArmsWatchdog(%s) = %v, want %v", node, got, want)
				}
			}
		})
	}
}

// TestWatchdogLevelRefused: each mistake in the watchdog level or section
// is named.
func TestWatchdogLevelRefused(t *testing.T) {
	agent := writeAgent(t, "fence_apc_snmp", 0o755)
	pw := writePassword(t, "s3cret\n")
	tests := []struct {
		name, yaml, want string
	}{
		{"no device", "topology: {defaults: [[watchdog]]}\n", "watchdog.device: required"},
		{"a relative device", "watchdog: {device: watchdog0}\n", "not an absolute path"},
		{"a relative socket", "watchdog: {device: \"unix:wd.sock\"}\n", "not an absolute path"},
		{"a fraction of a second", "watchdog: {timeout: 1500ms}\n", "whole seconds"},
		{"too short a confirm", "watchdog: {confirm: 1s}\n", "3s to 10m"},
		{"a negative orderAfter", "watchdog: {orderAfter: -1s}\n", "10s to 10m"},
		{"an orderAfter within the kubelet's renew interval", "watchdog: {orderAfter: 4s}\n", "between two renewals of a live node"},
		{"beside a power device", "topology: {defaults: [[watchdog, pdu-a]]}\nwatchdog: {device: /dev/watchdog}\n" + pdu(agent, pw), "a level of its own"},
		{"not the last level", "topology: {defaults: [[watchdog], [pdu-a]]}\nwatchdog: {device: /dev/watchdog}\n" + pdu(agent, pw), "must be the last"},
		{"with a plug", "topology: {defaults: [[{device: watchdog, plug: \"1\"}]]}\nwatchdog: {device: /dev/watchdog}\n", "the watchdog has no plugs"},
		{"a device named watchdog", "fenceDevices: [{name: watchdog, agent: " + agent + "}]\n", "reserved for the node's own watchdog"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(header+tt.yaml), "test.yaml")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}

func pdu(agent, pw string) string {
	return "fenceDevices: [{name: pdu-a, agent: " + agent + ", secretOptions: {community: " + pw + "}}]\n"
}
