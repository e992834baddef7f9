package harness

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/pdusim"
	"fenced.io/fenced/pkg/config"
)

// configHarness is a Harness with what writeFencingConfigs reads — two
// machines, and with feeds two PDUs — and no process running.
func configHarness(t *testing.T, feeds int) *Harness {
	t.Helper()
	// A short root as Start's: the configuration's paths are unquoted in
	// YAML flow style, which t.TempDir's test-name paths would break.
	dir, err := os.MkdirTemp("", "fh-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	h := &Harness{t: t, Dir: dir}
	for i, name := range []string{"node-a", "node-b"} {
		h.Machines = append(h.Machines, &Machine{Name: name, bmcAddr: "198.18.7.1", bmcPort: 6230 + i, bmcPassword: "pw-" + name})
	}
	for j, name := range pduNames[:feeds] {
		p := &PDU{PDU: &pdusim.PDU{Name: name, Host: "198.18.7.1", Port: 16100 + j, Community: "c-" + name},
			CommunityFile: filepath.Join(h.Dir, name+".community")}
		if err := os.WriteFile(p.CommunityFile, []byte(p.Community+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		h.pdus = append(h.pdus, p)
		for i, m := range h.Machines {
			m.feeds = append(m.feeds, feed{Outlet: Outlet{PDU: name, Number: i + 1}, pdu: p})
		}
	}
	return h
}

// parseConfigFile reads and parses a configuration the harness wrote, as
// the agent does; it returns the text too, for messages.
func parseConfigFile(t *testing.T, file string) (*config.Config, []byte) {
	t.Helper()
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(text, file)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	return cfg, text
}

// TestFencingConfigTopology checks that the fencers' configuration the
// harness writes is one fenced accepts: without Topology exactly the
// BMC-only configuration; with it the PDUs through fence_apc_snmp and the
// BMCs through fence_ipmilan, in the levels asked for.
func TestFencingConfigTopology(t *testing.T) {
	for _, agent := range []string{"fence_apc_snmp", "fence_ipmilan"} {
		if _, err := config.FindFenceAgent(agent); err != nil {
			t.Skipf("%v (hack/install-deps.sh installs fence-agents)", err)
		}
	}
	cases := []struct {
		name   string
		feeds  int
		f      Fencing
		levels map[string][]config.Level
		absent []string // not in the fencers' configuration
	}{
		{name: "no topology: BMC levels only, no devices", feeds: 2, f: Fencing{},
			levels: map[string][]config.Level{"node-a": {{{Device: "bmc"}}}},
			absent: []string{"fenceDevices", "topology", "monitorInterval"}},
		{name: "dual feed after the BMC", feeds: 2, f: Fencing{Topology: "{defaults: [[bmc], [pdu-a, pdu-b]]}", MonitorInterval: 10 * time.Second},
			levels: map[string][]config.Level{
				"node-a": {{{Device: "bmc"}}, {{Device: "pdu-a", Plug: "1"}, {Device: "pdu-b", Plug: "1"}}},
				"node-b": {{{Device: "bmc"}}, {{Device: "pdu-a", Plug: "2"}, {Device: "pdu-b", Plug: "2"}}},
			}},
		{name: "fence_ipmilan and a mislabelled outlet", feeds: 1, f: Fencing{
			Topology:       "{nodes: [{name: node-a, levels: [[ipmi-node-a]]}, {name: node-b, levels: [[pdu-a]]}]}",
			IPMILanDevices: true, PDUPlugs: map[string]map[string]string{"pdu-a": {"node-b": "1"}},
		}, levels: map[string][]config.Level{
			"node-a": {{{Device: "ipmi-node-a", Plug: "node-a"}}},
			"node-b": {{{Device: "pdu-a", Plug: "1"}}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := configHarness(t, c.feeds)
			_, fencerFile, err := h.writeFencingConfigs(&c.f)
			if err != nil {
				t.Fatal(err)
			}
			cfg, text := parseConfigFile(t, fencerFile)
			for node, want := range c.levels {
				if got := cfg.Levels(node); !reflect.DeepEqual(got, want) {
					t.Errorf("Levels(%s) = %v, want %v\n%s", node, got, want, text)
				}
			}
			for _, s := range c.absent {
				if strings.Contains(string(text), s) {
					t.Errorf("configuration has %q:\n%s", s, text)
				}
			}
			if got := cfg.Fencer.MonitorInterval; c.f.MonitorInterval > 0 && (got == nil || *got != c.f.MonitorInterval) {
				t.Errorf("monitorInterval %v, want %s", got, c.f.MonitorInterval)
			}
		})
	}
}

// TestFencingConfigWatchdog: with Watchdog the fencers' configuration
// gives the watchdog machines the level [[watchdog]] and every other one
// [[bmc]], and arms nothing on the fencer; a watchdog machine's agent
// reads an observer's configuration naming its own watchdog, which it
// arms; the shared fencers' file is valid on its own.
func TestFencingConfigWatchdog(t *testing.T) {
	h := configHarness(t, 0)
	h.Machines[0].Fencer = true
	for _, m := range h.Machines {
		m.Dir = filepath.Join(h.Dir, m.Name)
	}
	f := &Fencing{Watchdog: &Watchdog{Machines: []string{"node-b"}, Section: "timeout: 2s, confirm: 5s",
		MachineSections: map[string]string{"node-b": "timeout: 3s"}}}
	if _, _, err := h.writeFencingConfigs(f); err != nil {
		t.Fatal(err)
	}
	parseConfigFile(t, h.FencerConfigFile())
	fencer, _ := parseConfigFile(t, h.MachineConfigFile(h.Machines[0]))
	b := h.Machines[1]
	if fencer.WatchdogLevel("node-b") != 1 || fencer.WatchdogLevel("node-a") != 0 || !reflect.DeepEqual(fencer.Levels("node-a"), []config.Level{{{Device: config.DeviceBMC}}}) {
		t.Errorf("fencer's levels: node-a %v, node-b %v", fencer.Levels("node-a"), fencer.Levels("node-b"))
	}
	if fencer.ArmsWatchdog("node-a") || fencer.Watchdog.Timeout != 2*time.Second || fencer.Watchdog.Confirm != 5*time.Second {
		t.Errorf("fencer's watchdog: arms %v, %+v", fencer.ArmsWatchdog("node-a"), fencer.Watchdog)
	}
	agent, _ := parseConfigFile(t, h.MachineConfigFile(b))
	if agent.CanFence() || !agent.ArmsWatchdog(b.Name) || agent.Watchdog.Device != b.WatchdogDevice() || agent.Watchdog.Timeout != 3*time.Second {
		t.Errorf("%s's agent: fencer %v, arms %v, watchdog %+v, want device %s", b.Name, agent.CanFence(), agent.ArmsWatchdog(b.Name), agent.Watchdog, b.WatchdogDevice())
	}
	if _, _, err := h.writeFencingConfigs(&Fencing{Watchdog: &Watchdog{}, Topology: "{defaults: [[bmc]]}"}); err == nil {
		t.Error("Watchdog with a Topology of its own accepted")
	}
}

// TestFencingConfigGossipKeyDirs: with GossipKeyDirs every machine reads a
// configuration of its own naming its own key directory, which holds the
// harness's key as the Secret's "key", written as the kubelet does; the
// fencer's keeps the inventory, an observer's has none.
func TestFencingConfigGossipKeyDirs(t *testing.T) {
	h := configHarness(t, 0)
	h.Machines[0].Fencer = true
	if _, _, err := h.writeFencingConfigs(&Fencing{GossipKeyDirs: true}); err != nil {
		t.Fatal(err)
	}
	key, err := h.GossipKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range h.Machines {
		cfg, _ := parseConfigFile(t, h.MachineConfigFile(m))
		if cfg.Gossip.KeyDir != h.GossipKeyDir(m) || cfg.Gossip.KeyFile != "" {
			t.Errorf("%s: gossip %+v, want keyDir %s", m.Name, cfg.Gossip, h.GossipKeyDir(m))
		}
		if got := len(cfg.BMCs) > 0; got != m.Fencer {
			t.Errorf("%s: inventory %v, fencer %v", m.Name, got, m.Fencer)
		}
		link, err := os.Readlink(filepath.Join(h.GossipKeyDir(m), "key"))
		if err != nil || link != "..data/key" {
			t.Errorf("%s: key is not a Secret volume's symlink: %q, %v", m.Name, link, err)
		}
		content, err := os.ReadFile(filepath.Join(h.GossipKeyDir(m), "key"))
		if err != nil || strings.TrimSpace(string(content)) != base64.StdEncoding.EncodeToString(key) {
			t.Errorf("%s: key file %q, %v", m.Name, content, err)
		}
	}
	// A machine's copy changes alone.
	if err := h.SetGossipKeys(h.Machines[1], map[string][]byte{"key": key, "next": make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	for i, m := range h.Machines {
		entries, err := os.ReadDir(h.GossipKeyDir(m))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".") {
				names = append(names, e.Name())
			}
		}
		want := []string{"key"}
		if i == 1 {
			want = []string{"key", "next"}
		}
		if !reflect.DeepEqual(names, want) {
			t.Errorf("%s's keys: %v, want %v", m.Name, names, want)
		}
	}
}

// TestFencingConfigVolume: with ConfigVolume the fencers' configuration is
// a ConfigMap volume's key — a symlink into ..data — and SetFencerConfig
// swaps a new ..data in, read through the same path; without it, the file
// is replaced by a rename. Either way the path the agents were given
// reads the new text.
func TestFencingConfigVolume(t *testing.T) {
	for _, volume := range []bool{false, true} {
		t.Run(map[bool]string{false: "file", true: "volume"}[volume], func(t *testing.T) {
			h := configHarness(t, 0)
			h.Machines[0].Fencer = true
			_, fencerFile, err := h.writeFencingConfigs(&Fencing{ConfigVolume: volume})
			if err != nil {
				t.Fatal(err)
			}
			if fencerFile != h.FencerConfigFile() {
				t.Errorf("the fencers read %s, FencerConfigFile is %s", fencerFile, h.FencerConfigFile())
			}
			link, linkErr := os.Readlink(fencerFile)
			if volume && (linkErr != nil || link != "..data/"+fencerConfigKey) {
				t.Errorf("%s is not a ConfigMap volume's symlink: %q, %v", fencerFile, link, linkErr)
			}
			if !volume && linkErr == nil {
				t.Errorf("%s is a symlink without ConfigVolume", fencerFile)
			}
			before, err := os.Readlink(filepath.Join(filepath.Dir(fencerFile), "..data"))
			if volume && err != nil {
				t.Fatal(err)
			}
			if err := h.SetFencerConfig("changed\n"); err != nil {
				t.Fatal(err)
			}
			if text, err := os.ReadFile(fencerFile); err != nil || string(text) != "changed\n" {
				t.Errorf("%s after SetFencerConfig: %q, %v", fencerFile, text, err)
			}
			if after, _ := os.Readlink(filepath.Join(filepath.Dir(fencerFile), "..data")); volume && after == before {
				t.Errorf("..data still points at %s: the update was not swapped in", before)
			}
		})
	}
	h := configHarness(t, 0)
	if _, _, err := h.writeFencingConfigs(&Fencing{ConfigVolume: true, GossipKeyDirs: true}); err == nil {
		t.Error("ConfigVolume with GossipKeyDirs accepted")
	}
}
