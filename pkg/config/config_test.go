package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/vocab"
)

// writePassword creates a password file and returns its path.
func writePassword(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const header = "apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\n"

// TestParseAppliesInheritance: a node inherits bmc.defaults field by
// field; a setting neither sets stays unset (zero, Retries nil) for the
// device package to default (device's TestWithDefaults and
// TestInventoryAppliesDeviceDefaults).
func TestParseAppliesInheritance(t *testing.T) {
	pw := writePassword(t, "s3cret\n")
	t.Setenv("NODE_B_PW", "other")
	cfg, err := Parse([]byte(header+`
bmc:
  defaults:
    protocol: ipmi
    username: fenced
    passwordFile: `+pw+`
  nodes:
    - name: node-a
      address: 198.18.0.10
    - name: node-b
      address: 198.18.0.11
      port: 6230
      passwordEnv: NODE_B_PW
      timeout: 2s
      retries: 0
      ipmi: {cipherSuite: 17, privilegeLevel: operator}
    - name: node-c
      protocol: redfish
      address: bmc-c.example
      redfish: {scheme: http, auth: basic}
    - name: node-d
      protocol: redfish
      address: bmc-d.example
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.BMCs) != 4 {
		t.Fatalf("got %d BMCs", len(cfg.BMCs))
	}
	a, _ := cfg.BMC("node-a")
	want := ResolvedBMC{Node: "node-a", Protocol: "ipmi", Address: "198.18.0.10", Username: "fenced",
		Password: PasswordSource{File: pw}}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("node-a =\n %+v\nwant\n %+v", a, want)
	}
	if pwd, err := a.Password.Read(); err != nil || pwd != "s3cret" {
		t.Errorf("node-a password = %q, %v (trailing newline must be stripped)", pwd, err)
	}
	b, _ := cfg.BMC("node-b")
	if b.Port != 6230 || b.Timeout != 2*time.Second || b.Retries == nil || *b.Retries != 0 || b.IPMICipherSuite != 17 ||
		b.IPMIPrivilegeLevel != "operator" || b.Password != (PasswordSource{Env: "NODE_B_PW"}) {
		t.Errorf("node-b overrides not applied: %+v", b)
	}
	c, _ := cfg.BMC("node-c")
	if c.Port != 0 || c.RedfishScheme != "http" || c.RedfishAuth != "basic" {
		t.Errorf("node-c = %+v", c)
	}
	d, _ := cfg.BMC("node-d")
	if d.Port != 0 || d.RedfishScheme != "" || d.Timeout != 0 || d.Retries != nil {
		t.Errorf("node-d = %+v, want its settings unset", d)
	}
	if _, ok := cfg.BMC("node-z"); ok {
		t.Error("unknown node found")
	}
}

func TestParseRejectsBadInput(t *testing.T) {
	pw := writePassword(t, "pw")
	emptyPW := writePassword(t, "\n")
	missing := filepath.Join(t.TempDir(), "does-not-exist")
	unreadable := t.TempDir() // a directory: unreadable as a file, even for root
	defaults := "bmc:\n  defaults: {protocol: ipmi, username: u, passwordFile: " + pw + "}\n  nodes:\n"

	cases := []struct {
		name string
		yaml string
		want []string // every substring must be in the error
	}{
		{"malformed YAML", header + "bmc: [", []string{"test.yaml", "yaml"}},
		{"missing apiVersion", "kind: FencedConfiguration\n", []string{"apiVersion/kind", `want "fenced.io/v1alpha1"/"FencedConfiguration"`}},
		{"wrong kind", "apiVersion: fenced.io/v1alpha1\nkind: Other\n", []string{"apiVersion/kind"}},
		{"unknown top-level field", header + "bmcs: {}\n", []string{"bmcs: unknown field; did you mean bmc?"}},
		{"unknown node field", header + defaults + "    - {name: a, adress: 198.18.0.1}\n", []string{"bmc.nodes[0].adress: unknown field; did you mean address?"}},
		{"unknown nested field", header + defaults + "    - {name: a, address: 198.18.0.1, ipmi: {cipher: 3}}\n", []string{"bmc.nodes[0].ipmi.cipher: unknown field"}},
		{"missing address", header + defaults + "    - {name: node-a}\n", []string{"bmc.nodes[0].address (node-a): required"}},
		{"missing name", header + defaults + "    - {address: 198.18.0.1}\n", []string{"bmc.nodes[0].name: required"}},
		{"invalid name", header + defaults + "    - {name: Node_A, address: 198.18.0.1}\n", []string{"bmc.nodes[0].name (Node_A): not a valid node name"}},
		{"unknown protocol", header + defaults + "    - {name: node-a, address: x, protocol: ilo}\n", []string{`bmc.nodes[0].protocol (node-a): unknown protocol "ilo"`}},
		{"no protocol anywhere", header + "bmc:\n  defaults: {username: u, passwordFile: " + pw + "}\n  nodes:\n    - {name: node-a, address: x}\n",
			[]string{"bmc.nodes[0].protocol (node-a): required"}},
		{"duplicate node", header + defaults + "    - {name: node-a, address: x}\n    - {name: node-a, address: x2}\n",
			[]string{"bmc.nodes[1].name (node-a): duplicate node: already defined at bmc.nodes[0]"}},
		{"missing password file", header + defaults + "    - {name: node-a, address: x, passwordFile: " + missing + "}\n",
			[]string{"bmc.nodes[0].passwordFile (node-a):", "no such file"}},
		{"unreadable password file", header + defaults + "    - {name: node-a, address: x, passwordFile: " + unreadable + "}\n",
			[]string{"bmc.nodes[0].passwordFile (node-a):", "is a directory"}},
		{"empty password file", header + defaults + "    - {name: node-a, address: x, passwordFile: " + emptyPW + "}\n",
			[]string{"passwordFile (node-a): password file", "is empty"}},
		{"unset password env", header + defaults + "    - {name: node-a, address: x, passwordEnv: FENCED_TEST_UNSET_VAR}\n",
			[]string{"bmc.nodes[0].passwordEnv (node-a): environment variable FENCED_TEST_UNSET_VAR is not set"}},
		{"no password source", header + "bmc:\n  defaults: {protocol: ipmi, username: u}\n  nodes:\n    - {name: node-a, address: x}\n",
			[]string{"bmc.nodes[0].passwordFile (node-a): required"}},
		{"two password sources", header + defaults + "    - {name: node-a, address: x, passwordFile: " + pw + ", passwordEnv: X}\n",
			[]string{"passwordFile/passwordEnv (node-a): set only one"}},
		{"inline password", header + defaults + "    - {name: node-a, address: x, password: hunter2}\n",
			[]string{"bmc.nodes[0].password (node-a): inline passwords are not accepted"}},
		{"cipher suite 0", header + defaults + "    - {name: node-a, address: x, ipmi: {cipherSuite: 0}}\n",
			[]string{"ipmi.cipherSuite (node-a): 0 authenticates nothing"}},
		{"bad privilege", header + defaults + "    - {name: node-a, address: x, ipmi: {privilegeLevel: root}}\n",
			[]string{`ipmi.privilegeLevel (node-a): unknown level "root"`}},
		{"bad port", header + defaults + "    - {name: node-a, address: x, port: 70000}\n", []string{"port (node-a): 70000 is not a port"}},
		{"bad timeout", header + defaults + "    - {name: node-a, address: x, timeout: 0s}\n", []string{"line 6: bmc.nodes[0].timeout (node-a): 0s is out of range"}},
		{"unparsable timeout", header + defaults + "    - {name: node-a, address: x, timeout: soon}\n", []string{"soon"}},
		{"bad redfish auth", header + defaults + "    - {name: node-a, protocol: redfish, address: x, redfish: {auth: token}}\n",
			[]string{`bmc.nodes[0].redfish.auth (node-a): unknown auth "token"`}},
		{"missing CA file", header + defaults + "    - {name: node-a, protocol: redfish, address: x, redfish: {caFile: " + missing + "}}\n",
			[]string{"bmc.nodes[0].redfish.caFile (node-a):", "no such file"}},
		{"several errors at once", header + defaults + "    - {name: node-a}\n    - {name: node-b, protocol: foo}\n",
			[]string{"bmc.nodes[0].address (node-a): required", "bmc.nodes[1].protocol (node-b): unknown", "bmc.nodes[1].address (node-b): required"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "test.yaml")
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error leaks the inline password: %v", err)
			}
		})
	}
}

func TestPasswordNeverInErrors(t *testing.T) {
	t.Setenv("FENCED_TEST_PW", "top-secret-value")
	// A validation error elsewhere in the node must not print the password.
	_, err := Parse([]byte(header+"bmc:\n  nodes:\n    - {name: node-a, protocol: ipmi, username: u, passwordEnv: FENCED_TEST_PW, port: -1}\n"), "t")
	if err == nil || strings.Contains(err.Error(), "top-secret-value") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("err = %v", err)
	}
}

func TestEmptyInventoryIsValid(t *testing.T) {
	cfg, err := Parse([]byte(header), "t")
	if err != nil || len(cfg.BMCs) != 0 {
		t.Fatalf("cfg = %+v, err = %v", cfg, err)
	}
}

// TestExampleConfigLoads keeps the documented example in deploy/ valid: its
// password files are pointed at a temp dir, nothing else is changed.
func TestExampleConfigLoads(t *testing.T) {
	data, err := os.ReadFile("../../deploy/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	re := regexp.MustCompile(`/etc/fenced/bmc/[\w-]+`)
	data = re.ReplaceAllFunc(data, func(p []byte) []byte {
		local := filepath.Join(dir, filepath.Base(string(p)))
		if err := os.WriteFile(local, []byte("pw\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return []byte(local)
	})
	cfg, err := Parse(data, "config.example.yaml")
	if err != nil {
		t.Fatalf("the documented example does not load: %v", err)
	}
	if len(cfg.BMCs) != 3 {
		t.Fatalf("example has %d nodes, want 3", len(cfg.BMCs))
	}
	w3, _ := cfg.BMC("worker-3")
	if w3.Protocol != ProtocolRedfish || w3.Username != "fenced" || w3.Port != 0 {
		t.Errorf("worker-3 = %+v", w3)
	}
}

func TestSectionDefaultsAndOverrides(t *testing.T) {
	cfg, err := Parse([]byte(header), "t")
	if err != nil {
		t.Fatal(err)
	}
	// The README's defaults of the policy section; the settings the file
	// does not expose are the core's own.
	decide := core.DefaultPolicy()
	decide.Mode, decide.FenceAfter, decide.MaxUnhealthy, decide.MaxConcurrentPowerActions = vocab.ModeConfirmOnly, time.Minute, 0.5, 1
	decide.FenceDelay, decide.PowerOnAfterFence, decide.ForceDeletePods = 5*time.Second, false, true
	decide.ShutdownWait, decide.DryRun = 5*time.Minute, false
	// The stale report's settings are unset: pkg/stale's defaults.
	want := Policy{Policy: decide}
	if cfg.Policy != want {
		t.Errorf("default policy %+v, want %+v", cfg.Policy, want)
	}
	// The fencer's timings are unset: pkg/fencing's and pkg/fencing/device's.
	if cfg.Gossip.Port != heartbeat.DefaultPort || cfg.Fencer != (Fencer{LeaseNamespace: "fenced-system"}) {
		t.Errorf("defaults: gossip %+v fencer %+v", cfg.Gossip, cfg.Fencer)
	}
	if !cfg.Shutdown.Announce {
		t.Errorf("default shutdown %+v, want announce", cfg.Shutdown)
	}
	cfg, err = Parse([]byte(header+`
clusterName: prod
gossip: {port: 17946, keyFile: /k, probeInterval: 500ms, probeTimeout: 200ms, suspicionMult: 3, gossipInterval: 100ms, beatInterval: 100ms}
policy: {mode: power-off, fenceAfter: 30s, maxUnhealthy: "34%", maxConcurrentPowerActions: 2, fenceDelay: 0s, afterFence: "on", forceDeletePods: false, shutdownWait: 0s,
  staleAttachmentGrace: 30s, deleteStaleVolumeAttachments: true, dryRun: true}
fencer: {leaseNamespace: kube-system, leaseDuration: 30s, powerTimeout: 60s, monitorInterval: 0s, maxConcurrentPowerReads: 4}
shutdown: {announce: false}
`), "t")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClusterName != "prod" || cfg.Gossip != (Gossip{Port: 17946, KeyFile: "/k", Profile: GossipProfileLAN, GossipTimings: GossipTimings{ProbeInterval: 500 * time.Millisecond,
		ProbeTimeout: 200 * time.Millisecond, SuspicionMult: 3, GossipInterval: 100 * time.Millisecond}, BeatInterval: 100 * time.Millisecond}) {
		t.Errorf("gossip %+v", cfg.Gossip)
	}
	set := core.DefaultPolicy()
	set.Mode, set.FenceAfter, set.MaxUnhealthy, set.MaxConcurrentPowerActions = vocab.ModePowerOff, 30*time.Second, 0.34, 2
	set.FenceDelay, set.PowerOnAfterFence, set.ForceDeletePods, set.ShutdownWait, set.DryRun = 0, true, false, 0, true
	if cfg.Policy != (Policy{Policy: set, StaleAttachmentGrace: 30 * time.Second, DeleteStaleVolumeAttachments: true}) {
		t.Errorf("policy %+v", cfg.Policy)
	}
	off := time.Duration(0) // monitorInterval: 0s, set: the checks are off
	if want := (Fencer{LeaseNamespace: "kube-system", LeaseDuration: 30 * time.Second, PowerTimeout: time.Minute,
		MonitorInterval: &off, MaxConcurrentPowerReads: 4}); !reflect.DeepEqual(cfg.Fencer, want) {
		t.Errorf("fencer %+v, want %+v", cfg.Fencer, want)
	}
	if cfg.Shutdown.Announce {
		t.Errorf("shutdown %+v, want announce off", cfg.Shutdown)
	}
}

func TestSectionErrors(t *testing.T) {
	cases := map[string]string{
		"policy: {mode: reboot}":                    `policy.mode: unknown mode "reboot"`,
		`policy: {maxUnhealthy: "0.5"}`:             `policy.maxUnhealthy: "0.5" is not a percentage`,
		`policy: {maxUnhealthy: "150%"}`:            `policy.maxUnhealthy: "150%" is not a percentage`,
		`policy: {maxUnhealthy: "NaN%"}`:            `policy.maxUnhealthy: "NaN%" is not a percentage`,
		"policy: {maxConcurrentPowerActions: -1}":   "policy.maxConcurrentPowerActions: -1: at least 1",
		"policy: {afterFence: maybe}":               `policy.afterFence: "maybe": want off or on`,
		"policy: {fenceAfter: 1m, fenceAfterr: 2m}": "policy.fenceAfterr: unknown field; did you mean fenceAfter?",
		"gossip: {port: 0x10000}":                   "gossip.port: 65536 is not a port",
		"gossip: {suspicionMult: 50}":               "gossip.suspicionMult: 50 is out of range",
		"gossip: {beatInterval: 10ms}":              "gossip.beatInterval: 10ms is out of range (0 for the default 200ms, 50ms to 5s)",
		"gossip: {beatInterval: 1m}":                "gossip.beatInterval: 1m0s is out of range",
		"gossip: {profile: wan}":                    `gossip.profile: "wan" is not a profile (lan or fast)`,
		"gossip: {probeTimeout: 2s}":                "gossip.probeTimeout: 2s must be shorter than probeInterval 1s (profile lan)",
		"gossip: {profile: fast, probeTimeout: 1s}": "gossip.probeTimeout: 1s must be shorter than probeInterval 300ms (profile fast)",
		"gossip: {profil: fast}":                    "gossip.profil: unknown field; did you mean profile?",
		"gossip: {keyFile: /k, keyDir: /d}":         "gossip.keyDir: set keyFile or keyDir, not both",
		"gossip: {keyFiles: [/k]}":                  "gossip.keyFiles: unknown field; did you mean keyFile?",
		"fencer: {leaseNamespace: Fenced_System}":   "fencer.leaseNamespace: not a namespace name",
		"fencer: {leaseDuration: 1s}":               "fencer.leaseDuration: 1s is out of range",
		"fencer: {maxConcurrentPowerReads: -1}":     "fencer.maxConcurrentPowerReads: -1 is out of range",
		"fencer: {maxConcurrentPowerReads: 5000}":   "fencer.maxConcurrentPowerReads: 5000 is out of range",
		"policy: {shutdownWait: 2h}":                "policy.shutdownWait: 2h0m0s is out of range",
		"shutdown: {announce: yes-please}":          "shutdown.announce",
		"policy: {staleAttachmentGrace: 1s}":        "policy.staleAttachmentGrace: 1s is out of range",
		"policy: {staleAttachmentGrace: 48h}":       "policy.staleAttachmentGrace: 48h0m0s is out of range",
		"policy: {deleteStaleVolumeAttachments: 1}": "deleteStaleVolumeAttachments",
		"shutdown: {anounce: true}":                 "shutdown.anounce: unknown field; did you mean announce?",
	}
	for yaml, want := range cases {
		_, err := Parse([]byte(header+yaml+"\n"), "t")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", yaml, err, want)
		}
	}
}

func TestGossipProfiles(t *testing.T) {
	fast := GossipProfiles[GossipProfileFast]
	beat := heartbeat.DefaultBeatInterval
	cases := []struct {
		name, yaml string
		want       Gossip
	}{
		{"default is lan", "", Gossip{Port: heartbeat.DefaultPort, Profile: GossipProfileLAN, GossipTimings: GossipProfiles[GossipProfileLAN], BeatInterval: beat}},
		{"lan", "gossip: {profile: lan}", Gossip{Port: heartbeat.DefaultPort, Profile: GossipProfileLAN, GossipTimings: GossipProfiles[GossipProfileLAN], BeatInterval: beat}},
		{"fast", "gossip: {profile: fast}", Gossip{Port: heartbeat.DefaultPort, Profile: GossipProfileFast, GossipTimings: fast, BeatInterval: beat}},
		{"fast, one field overridden", "gossip: {profile: fast, suspicionMult: 5}", Gossip{Port: heartbeat.DefaultPort, Profile: GossipProfileFast,
			GossipTimings: GossipTimings{ProbeInterval: fast.ProbeInterval, ProbeTimeout: fast.ProbeTimeout, SuspicionMult: 5, GossipInterval: fast.GossipInterval}, BeatInterval: beat}},
		{"0 is the profile's value", "gossip: {profile: fast, probeInterval: 0s}", Gossip{Port: heartbeat.DefaultPort, Profile: GossipProfileFast, GossipTimings: fast, BeatInterval: beat}},
		{"a key directory", "gossip: {keyDir: /etc/fenced/gossip}", Gossip{Port: heartbeat.DefaultPort, KeyDir: "/etc/fenced/gossip",
			Profile: GossipProfileLAN, GossipTimings: GossipProfiles[GossipProfileLAN], BeatInterval: beat}},
		{"beats every 100ms", "gossip: {beatInterval: 100ms}", Gossip{Port: heartbeat.DefaultPort, Profile: GossipProfileLAN,
			GossipTimings: GossipProfiles[GossipProfileLAN], BeatInterval: 100 * time.Millisecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(header+tc.yaml+"\n"), "t")
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Gossip != tc.want {
				t.Errorf("gossip %+v, want %+v", cfg.Gossip, tc.want)
			}
		})
	}
	if fast.ProbeTimeout >= fast.ProbeInterval || fast.SuspicionMult < 1 {
		t.Errorf("the fast profile is not valid: %+v", fast)
	}
}
