package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/ipmisim"
)

// closedPort is a loopback TCP port nothing listens on: an API server that
// cannot be reached, refused at once.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// apiWithoutNodes is an API server that knows no Node: every request is
// answered 404 NotFound, as the API server answers for a Node that does
// not exist.
func apiWithoutNodes(t *testing.T) string {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := filepath.Base(r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"nodes %q not found","reason":"NotFound","details":{"name":%q,"kind":"nodes"},"code":404}`, name, name)
	}))
	t.Cleanup(api.Close)
	return api.URL
}

// TestExitCodes runs the built binary as a user types it: every command
// against each bad input, asserting the exit code of the one table
// (docs/operations.md, "Exit codes") and what the message says. An
// unreachable API server, a missing configuration and an unreachable power
// device must each fail within seconds.
func TestExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildFenced(t, "fenced")
	dir := t.TempDir()
	udp, err := ipmisim.FreePort("udp", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	// node-a's BMC does not answer (nothing listens on its port).
	cfg := writeFile(t, dir, "config.yaml", fmt.Sprintf(`apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
bmc:
  nodes:
    - {name: node-a, protocol: ipmi, address: 127.0.0.1, port: %d, username: u, passwordFile: %s, timeout: 300ms, retries: 0}
`, udp, writeFile(t, dir, "pw", "x\n")))
	missing := filepath.Join(dir, "nope.yaml")
	unreachable := kubeconfigFor(t, t.TempDir(), fmt.Sprintf("https://127.0.0.1:%d", closedPort(t)))
	noNodes := kubeconfigFor(t, t.TempDir(), apiWithoutNodes(t))

	// The commands, as a user types them, each with the node argument it
	// takes; nil: the input does not apply to it.
	type command struct {
		args []string
		// config: it reads the configuration file; api: it asks the API
		// server; node: it takes a NODE that must exist; prints: it
		// prints a result (-o).
		config, api, node, prints bool
	}
	commands := map[string]command{
		"status":            {args: []string{"status"}, config: true, api: true, prints: true},
		"diagnose":          {args: []string{"diagnose"}, config: true, api: true, prints: true},
		"confirm":           {args: []string{"confirm", "nobody", "--yes"}, config: true, api: true, node: true},
		"unfence":           {args: []string{"unfence", "nobody"}, config: true, api: true, node: true},
		"bmc status":        {args: []string{"bmc", "status", "nobody"}, config: true, node: true, prints: true},
		"bmc off":           {args: []string{"bmc", "off", "nobody", "--yes"}, config: true, node: true, prints: true},
		"device status":     {args: []string{"device", "status", "nobody"}, config: true, node: true, prints: true},
		"device cycle":      {args: []string{"device", "cycle", "nobody", "--yes"}, config: true, node: true, prints: true},
		"topology check":    {args: []string{"topology", "check", "nobody"}, config: true, node: true, prints: true},
		"credentials issue": {args: []string{"credentials", "issue", "nobody", "--out", filepath.Join(dir, "kc"), "--certificate-authority", filepath.Join(dir, "pw")}, api: true},
		"agent":             {args: []string{"agent", "--node-name", "nobody", "--insecure-gossip"}, config: true},
		"version":           {args: []string{"version"}, prints: true},
		"pause":             {args: []string{"pause", "--reason", "test"}, config: true, api: true, prints: true},
		"resume":            {args: []string{"resume"}, config: true, api: true, prints: true},
		"exclude":           {args: []string{"exclude", "nobody"}, config: true, api: true, node: true, prints: true},
		"include":           {args: []string{"include", "nobody"}, config: true, api: true, node: true, prints: true},
		"history":           {args: []string{"history", "nobody"}, config: true, api: true, node: true, prints: true},
	}
	type input struct {
		name  string
		extra []string
		// applies says whether the input means something to c.
		applies  func(c command) bool
		wantCode int
		want     string
		// env replaces the kubeconfig the command finds.
		kubeconfig string
	}
	always := func(command) bool { return true }
	inputs := []input{
		{"unknown flag", []string{"--bogus"}, always, exitUsage, "unknown flag: --bogus", noNodes},
		{"bad output", []string{"-o", "xml"}, func(c command) bool { return c.prints },
			exitUsage, `output format "xml"`, noNodes},
		{"missing config", []string{"--config", missing}, func(c command) bool { return c.config }, exitCannotCheck, "nope.yaml", noNodes},
		{"no kubeconfig", nil, func(c command) bool { return c.api }, exitCannotCheck, "no Kubernetes configuration found", ""},
		{"unreachable API", []string{"--request-timeout", "2s"}, func(c command) bool { return c.api }, exitCannotCheck, "connection refused", unreachable},
		{"unknown node", []string{"--config", cfg}, func(c command) bool { return c.node }, exitUsage, `unknown node "nobody"`, noNodes},
	}
	run := func(t *testing.T, kubeconfig string, args ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		// Nothing of the machine's: no kubeconfig but the test's, no
		// in-cluster service account, no configuration file but --config
		// (the default path, /etc/fenced/config.yaml, is absent here).
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+t.TempDir(), "KUBERNETES_SERVICE_HOST=",
			"FENCED_CONFIG=", "FENCED_BOOT_ID=b1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		if elapsed := time.Since(start); elapsed > 10*time.Second {
			t.Errorf("took %s: it must fail fast", elapsed)
		}
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, out.String()
		case errors.As(err, &exit):
			return exit.ExitCode(), out.String()
		}
		t.Fatalf("%v\n%s", err, out.String())
		return 0, ""
	}
	for name, c := range commands {
		for _, in := range inputs {
			if !in.applies(c) {
				continue
			}
			t.Run(name+"/"+in.name, func(t *testing.T) {
				args := append(append([]string{}, c.args...), in.extra...)
				code, out := run(t, in.kubeconfig, args...)
				if code != in.wantCode || !strings.Contains(out, in.want) {
					t.Errorf("fenced %s: exit %d, want %d and %q in:\n%s", strings.Join(args, " "), code, in.wantCode, in.want, out)
				}
			})
		}
	}

	// The rest of the table: unknown subcommands, bad arguments, what a
	// power device that cannot be reached means to each power command.
	others := []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"nosuch"}, exitUsage, `unknown command "nosuch" for "fenced"`},
		{[]string{"stauts"}, exitUsage, "did you mean status?"},
		{[]string{"bmc", "nosuch"}, exitUsage, `unknown command "nosuch" for "fenced bmc"`},
		{[]string{"device", "nosuch"}, exitUsage, `unknown command "nosuch" for "fenced device"`},
		{[]string{"topology", "chek"}, exitUsage, "did you mean check?"},
		{[]string{"credentials", "nosuch"}, exitUsage, `unknown command "nosuch" for "fenced credentials"`},
		{[]string{"bmc"}, exitOK, "Talk to a node's BMC"},
		{[]string{"status", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"confirm"}, exitUsage, "expected exactly one NODE"},
		{[]string{"diagnose", "deployment/web"}, exitUsage, "want POD, pvc/NAME or node/NAME"},
		{[]string{"device", "status", "node-a", "--level", "2", "--config", cfg}, exitUsage, "--level 2"},
		{[]string{"bmc", "status", "node-a", "--config", cfg}, exitCannotCheck, "hint: nothing answers"},
		{[]string{"bmc", "status", "node-a", "-o", "json", "--config", cfg}, exitCannotCheck, `"errorKind": "unreachable"`},
		{[]string{"bmc", "off", "node-a", "--yes", "--config", cfg}, exitCannotCheck, "unreachable"},
		{[]string{"device", "status", "node-a", "--config", cfg}, exitCannotCheck, "power-status: unreachable"},
		{[]string{"device", "off", "node-a", "--yes", "--config", cfg}, exitCannotCheck, "node-a:"},
		// What topology check exists to find: a finding, not a failure to check.
		{[]string{"topology", "check", "--config", cfg}, exitFailure, "node-a: no fencing level answers"},
		{[]string{"status", "--server", fmt.Sprintf("https://127.0.0.1:%d", closedPort(t))}, exitCannotCheck, "connection refused"},
		{[]string{"pause", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"exclude"}, exitUsage, "expected exactly one NODE"},
		{[]string{"include", "a", "b"}, exitUsage, "expected exactly one NODE"},
		{[]string{"history", "a", "b"}, exitUsage, "expected exactly one NODE"},
		{[]string{"history"}, exitOK, "No fence recorded"},
		{[]string{"agent", "--node-name", "a", "--insecure-gossip", "--gossip-bind-address", "node-a.example", "--config", cfg}, exitUsage,
			`--gossip-bind-address "node-a.example" is not an IP address`},
		{[]string{"agent", "--node-name", "a", "--insecure-gossip", "--gossip-advertise-address", "10.0.0.300", "--config", cfg}, exitUsage,
			`--gossip-advertise-address "10.0.0.300" is not an IP address`},
		{[]string{"config", "nosuch"}, exitUsage, `unknown command "nosuch" for "fenced config"`},
		{[]string{"config", "validate", missing}, exitCannotCheck, "nope.yaml"},
	}
	for _, tc := range others {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out := run(t, noNodes, tc.args...)
			if code != tc.wantCode || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %d and %q in:\n%s", code, tc.wantCode, tc.want, out)
			}
		})
	}

	// No terminal and no --yes: a command that can do harm does nothing
	// at all, not even read — no request to the API server, no packet to
	// the BMC — and exits 2 (the test's standard input is /dev/null).
	var requests atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(api.Close)
	watched := kubeconfigFor(t, t.TempDir(), api.URL)
	bmc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bmc.Close() })
	watchedCfg := writeFile(t, dir, "watched.yaml", fmt.Sprintf(`apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
bmc:
  nodes:
    - {name: node-a, protocol: ipmi, address: 127.0.0.1, port: %d, username: u, passwordFile: %s, timeout: 300ms, retries: 0}
`, bmc.LocalAddr().(*net.UDPAddr).Port, filepath.Join(dir, "pw")))
	for _, args := range [][]string{
		{"bmc", "off", "node-a"},
		{"bmc", "cycle", "node-a"},
		{"device", "off", "node-a"},
		{"device", "cycle", "node-a", "-o", "json"},
		{"confirm", "node-a", "--power-off"},
		{"unfence", "node-a", "--force"},
	} {
		t.Run(strings.Join(args, " ")+"/no terminal without --yes", func(t *testing.T) {
			before := requests.Load()
			code, out := run(t, watched, append(args, "--config", watchedCfg)...)
			if code != exitUsage || !strings.Contains(out, "pass --yes") {
				t.Errorf("exit %d, want %d and %q in:\n%s", code, exitUsage, "pass --yes", out)
			}
			if n := requests.Load() - before; n > 0 {
				t.Errorf("%d request(s) to the API server", n)
			}
			_ = bmc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if _, _, err := bmc.ReadFrom(make([]byte, 512)); err == nil {
				t.Error("a packet reached the BMC")
			}
		})
	}
	// The control: with --yes the same command asks the API server (who
	// are you, the Event) and the BMC, so the watchers above see what
	// they would have to see.
	t.Run("bmc off node-a --yes/the watchers see it", func(t *testing.T) {
		before := requests.Load()
		code, out := run(t, watched, "bmc", "off", "node-a", "--yes", "--config", watchedCfg)
		if code != exitCannotCheck {
			t.Errorf("exit %d, want %d:\n%s", code, exitCannotCheck, out)
		}
		if requests.Load() == before {
			t.Error("no request to the API server")
		}
		_ = bmc.SetReadDeadline(time.Now().Add(time.Second))
		if _, _, err := bmc.ReadFrom(make([]byte, 512)); err != nil {
			t.Errorf("no packet reached the BMC: %v", err)
		}
	})
}
