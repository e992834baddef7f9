package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/ipmisim"
)

// fenced runs the CLI in-process and returns its exit code and output.
func fenced(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// buildFenced builds this command into a new directory, as name (fenced,
// or kubectl-fenced for kubectl's plugin mechanism), and returns its path:
// for the tests that run the binary as a user or kubectl does.
func buildFenced(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// writeFile writes content into dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// kubeconfigFor writes a kubeconfig into dir for the API server at server,
// with a token, and returns its path.
func kubeconfigFor(t *testing.T, dir, server string) string {
	t.Helper()
	return writeFile(t, dir, "kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+server+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
}

// inventoryFor writes a configuration with one IPMI node per simulator;
// node "bad-pw" points at the first simulator with a wrong password.
func inventoryFor(t *testing.T, sims map[string]*ipmisim.Sim) string {
	t.Helper()
	dir := t.TempDir()
	var nodes strings.Builder
	var first *ipmisim.Sim
	for name, s := range sims {
		pw := writeFile(t, dir, name+".pw", s.Password+"\n")
		fmt.Fprintf(&nodes, "    - {name: %s, address: %s, port: %d, username: %s, passwordFile: %s}\n",
			name, s.Addr, s.Port, s.Username, pw)
		first = s
	}
	badPW := writeFile(t, dir, "bad.pw", "wrong\n")
	fmt.Fprintf(&nodes, "    - {name: bad-pw, address: %s, port: %d, username: %s, passwordFile: %s}\n",
		first.Addr, first.Port, first.Username, badPW)
	return writeFile(t, dir, "config.yaml", `apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
bmc:
  defaults: {protocol: ipmi, timeout: 1s, retries: 1}
  nodes:
`+nodes.String())
}

// startNodeASim is the preamble of the tests of the bmc commands: it skips
// t under -short, else starts a BMC simulator for node-a and returns it
// with its inventory (inventoryFor).
func startNodeASim(t *testing.T) (*ipmisim.Sim, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs ipmi_sim")
	}
	sim := ipmisim.Start(t, ipmisim.Options{Name: "node-a"})
	return sim, inventoryFor(t, map[string]*ipmisim.Sim{"node-a": sim})
}

func TestBMCCommandsAgainstIPMISim(t *testing.T) {
	sim, cfg := startNodeASim(t)
	ctx := context.Background()
	fast := []string{"--power-wait", "100ms"}

	code, out, errOut := fenced(t, ctx, "bmc", "status", "node-a", "--config", cfg, "-o", "json")
	var res bmcResult
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("status: code %d, out %q, err %q", code, out, errOut)
	}
	if !res.OK || res.Power != "on" || res.SystemGUID != sim.SystemUUID || res.Endpoint != fmt.Sprintf("ipmi://127.0.0.1:%d", sim.Port) {
		t.Fatalf("status result = %+v", res)
	}

	// No cluster here: off and cycle say that no Event records them, and
	// go on (the Event itself: TestOperatorCommandsAgainstARealCluster).
	noCluster := []string{"--kubeconfig", filepath.Join(t.TempDir(), "none")}
	steps := []struct {
		action    string
		args      []string
		wantPower string
		wantText  string
	}{
		{"off", []string{"--yes"}, "off", "power off done, BMC reads off"},
		{"off", []string{"--yes"}, "off", "power already off, nothing sent"},
		{"on", nil, "on", "power on done, BMC reads on"},
		{"cycle", []string{"--yes", "--reason", "test"}, "on", "power cycle done, BMC reads on"},
	}
	for _, st := range steps {
		pidBefore, _ := sim.MachinePID()
		args := append([]string{"bmc", st.action, "node-a", "--config", cfg}, fast...)
		code, out, errOut := fenced(t, ctx, append(append(args, st.args...), noCluster...)...)
		if code != exitOK || !strings.Contains(out, st.wantText) {
			t.Fatalf("bmc %s: code %d, out %q, stderr %q", st.action, code, out, errOut)
		}
		if recorded := !strings.Contains(errOut, "no Event will record who did this"); recorded == (st.action != "on") {
			t.Errorf("bmc %s: stderr %q", st.action, errOut)
		}
		if got, err := sim.ToolPowerState(); err != nil || got != st.wantPower {
			t.Fatalf("after bmc %s ipmitool reads %q (%v)", st.action, got, err)
		}
		pid, alive := sim.MachinePID()
		if alive != (st.wantPower == "on") {
			t.Fatalf("after bmc %s machine alive=%v", st.action, alive)
		}
		if st.action == "cycle" && pid == pidBefore {
			t.Fatal("cycle did not restart the machine")
		}
	}
}

func TestBMCCommandFailuresAndExitCodes(t *testing.T) {
	sim, cfg := startNodeASim(t)
	ctx := context.Background()

	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string // substrings of stdout+stderr
	}{
		{"wrong password", []string{"bmc", "status", "bad-pw"}, exitCannotCheck,
			[]string{"power-status", "auth", "hint: the BMC refused user", "bad.pw"}},
		{"off without --yes or a terminal", []string{"bmc", "off", "node-a"}, exitUsage, []string{"pass --yes"}},
		{"cycle without --yes or a terminal", []string{"bmc", "cycle", "node-a"}, exitUsage, []string{"pass --yes"}},
		{"wrong password json", []string{"bmc", "off", "bad-pw", "-o", "json", "--yes", "--kubeconfig", "/nonexistent"}, exitCannotCheck,
			[]string{`"ok": false`, `"errorKind": "auth"`, `"power": "unknown"`}},
		{"unknown node", []string{"bmc", "status", "node-z"}, exitUsage, []string{`unknown node "node-z": it is not in the BMC inventory`}},
		{"missing node arg", []string{"bmc", "off"}, exitUsage, []string{"expected exactly one NODE"}},
		{"bad output flag", []string{"bmc", "status", "node-a", "-o", "xml"}, exitUsage, []string{`output format "xml"`}},
		{"yaml", []string{"bmc", "status", "node-a", "-o", "yaml"}, exitOK, []string{"power: \"on\"", "node: node-a"}},
		{"jsonpath", []string{"bmc", "status", "node-a", "-o", "jsonpath={.power}"}, exitOK, []string{"on"}},
		{"name", []string{"bmc", "status", "node-a", "-o", "name"}, exitOK, []string{"node/node-a"}},
		{"unknown flag", []string{"bmc", "status", "node-a", "--force"}, exitUsage, []string{"unknown flag: --force"}},
		{"bad log format", []string{"bmc", "status", "node-a", "--log-format", "xml"}, exitUsage, []string{"--log-format"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := fenced(t, ctx, append(tc.args, "--config", cfg)...)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out+errOut, w) {
					t.Errorf("output does not contain %q\nstdout: %s\nstderr: %s", w, out, errOut)
				}
			}
			if strings.Contains(out+errOut, sim.Password) {
				t.Error("output leaks the password")
			}
		})
	}
	if _, alive := sim.MachinePID(); !alive {
		t.Fatal("a refused request switched the machine off")
	}
}

func TestBMCUnreachableFailsWithinTimeout(t *testing.T) {
	port, err := ipmisim.FreePort("udp", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pw := writeFile(t, dir, "pw", "x")
	cfg := writeFile(t, dir, "c.yaml", fmt.Sprintf(`apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
bmc:
  nodes:
    - {name: node-a, protocol: ipmi, address: 127.0.0.1, port: %d, username: u, passwordFile: %s, timeout: 500ms, retries: 1}
`, port, pw))
	start := time.Now()
	code, _, errOut := fenced(t, context.Background(), "bmc", "status", "node-a", "--config", cfg)
	if code != exitCannotCheck || !strings.Contains(errOut, "unreachable") || !strings.Contains(errOut, "hint: nothing answers") {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("took %s", elapsed)
	}
}

func TestAgentValidatesBeforeRunning(t *testing.T) {
	dir := t.TempDir()
	// Nothing listens here: every case must fail before any connection.
	kubeconfig := kubeconfigFor(t, dir, "https://127.0.0.1:1")
	header := "apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\n"
	noKey := writeFile(t, dir, "nokey.yaml", header)
	badKey := writeFile(t, dir, "badkey.yaml", header+"gossip: {keyFile: "+writeFile(t, dir, "short.key", "c2hvcnQ=\n")+"}\n")
	missingKey := writeFile(t, dir, "missingkey.yaml", header+"gossip: {keyFile: "+filepath.Join(dir, "nope.key")+"}\n")
	malformed := writeFile(t, dir, "malformed.yaml", header+"bmc: {nodes: [{name: a, adress: x}]}\n")
	missingPW := writeFile(t, dir, "missing-pw.yaml", header+`bmc:
  nodes: [{name: node-a, protocol: ipmi, address: x, username: u, passwordFile: /nonexistent/pw}]
`)
	t.Setenv("KUBECONFIG", "")
	common := []string{"--kubeconfig", kubeconfig, "--node-name", "node-a", "--boot-id-file", writeFile(t, dir, "boot", "b1\n")}

	cases := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"malformed config", []string{"agent", "--config", malformed}, exitCannotCheck, "bmc.nodes[0].adress: unknown field; did you mean address?"},
		{"unreadable credentials", []string{"agent", "--config", missingPW, "--insecure-gossip"}, exitCannotCheck, "bmc.nodes[0].passwordFile (node-a): reading password file"},
		{"missing config file", []string{"agent", "--config", filepath.Join(dir, "nope.yaml")}, exitCannotCheck, "nope.yaml"},
		{"no gossip key", []string{"agent", "--config", noKey}, exitFailure, "no gossip key: set gossip.keyFile"},
		{"gossip key of the wrong size", []string{"agent", "--config", badKey}, exitFailure, "5 bytes; want 16, 24 or 32"},
		{"gossip key file missing", []string{"agent", "--config", missingKey}, exitFailure, "gossip key: open"},
		{"bad kubeconfig", []string{"agent", "--config", noKey, "--insecure-gossip", "--kubeconfig", filepath.Join(dir, "nope")}, exitCannotCheck, "kubeconfig"},
		{"unreadable boot ID", []string{"agent", "--config", noKey, "--insecure-gossip", "--boot-id-file", filepath.Join(dir, "nope")}, exitFailure, "boot ID"},
		{"extra argument", []string{"agent", "extra"}, exitUsage, `unexpected argument "extra"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			args := append(append([]string{}, tc.args[:1]...), append(common, tc.args[1:]...)...)
			code, _, errOut := fenced(t, ctx, args...)
			if code != tc.wantCode || !strings.Contains(errOut, tc.want) {
				t.Fatalf("code %d (want %d), stderr %q (want %q)", code, tc.wantCode, errOut, tc.want)
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("took %s: the agent tried to connect before failing", time.Since(start))
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestVersionAndHelp(t *testing.T) {
	code, out, _ := fenced(t, context.Background(), "version")
	if code != exitOK || !strings.HasPrefix(out, "fenced ") {
		t.Fatalf("version: %d %q", code, out)
	}
	for _, cmd := range [][]string{{}, {"agent"}, {"bmc"}, {"bmc", "status"}, {"bmc", "off"}, {"bmc", "on"}, {"bmc", "cycle"}, {"version"}} {
		code, out, _ := fenced(t, context.Background(), append(cmd, "--help")...)
		if code != exitOK || !strings.Contains(out, "Examples:") {
			t.Errorf("fenced %v --help: code %d, no example:\n%s", cmd, code, out)
		}
	}
}
