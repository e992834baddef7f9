package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigCommands runs the built binary as a user types it:
// `fenced config validate FILE` and `fenced config view FILE`, with their
// exit codes (0 valid, 1 mistakes, 2 usage, 3 could not read).
func TestConfigCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := buildFenced(t, "fenced")
	pw := writeFile(t, dir, "bmc.pw", "s3cret-password\n")
	valid := writeFile(t, dir, "valid.yaml", `apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
bmc:
  defaults: {protocol: ipmi, username: fenced, passwordFile: `+pw+`}
  nodes: [{name: node-a, address: 198.18.0.1}]
`)
	invalid := writeFile(t, dir, "invalid.yaml", `apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
policy:
  fenceAfter: 30
bmc:
  defaults: {pasword: x, UserName: u}
`)
	// Keys right, settings wrong: each on the line of its setting, or of
	// the item that lacks it (the example of docs/configuration.md).
	settings := writeFile(t, dir, "settings.yaml", `apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
bmc:
  defaults: {protocol: ipmi, username: fenced, passwordFile: `+pw+`}
  nodes:
    - name: worker-1
      address: 198.18.0.1
      port: 70000
    - {name: worker-2}
`)
	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string // lines of stdout, in order, exactly
		wantErr  string   // a substring of stderr
	}{
		{"valid", []string{"config", "validate", valid}, exitOK, []string{valid + ": valid"}, ""},
		{"invalid", []string{"config", "validate", invalid}, exitFailure, []string{
			invalid + `:4: policy.fenceAfter: want a duration like "30s", got the number 30`,
			invalid + ":6: bmc.defaults.pasword: unknown field; did you mean password?",
			invalid + ":6: bmc.defaults.UserName: keys are case-sensitive; did you mean username?",
		}, ""},
		{"settings", []string{"config", "validate", settings}, exitFailure, []string{
			settings + ":8: bmc.nodes[0].port (worker-1): 70000 is not a port (1-65535)",
			settings + ":9: bmc.nodes[1].address (worker-2): required",
		}, ""},
		{"missing file", []string{"config", "validate", filepath.Join(dir, "nope.yaml")}, exitCannotCheck, nil, "nope.yaml: no such file"},
		{"no argument", []string{"config", "validate"}, exitUsage, nil, "expected exactly one FILE"},
		{"view an invalid file", []string{"config", "view", invalid}, exitFailure, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBinary(t, bin, tc.args...)
			if code != tc.wantCode || !strings.Contains(stderr, tc.wantErr) {
				t.Fatalf("exit code %d (want %d), stderr %q (want %q)", code, tc.wantCode, stderr, tc.wantErr)
			}
			if tc.wantOut != nil && stdout != strings.Join(tc.wantOut, "\n")+"\n" {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, strings.Join(tc.wantOut, "\n"))
			}
		})
	}

	t.Run("view", func(t *testing.T) {
		code, stdout, stderr := runBinary(t, bin, "config", "view", valid)
		if code != exitOK {
			t.Fatalf("exit code %d, stderr %q", code, stderr)
		}
		for _, want := range []string{"passwordFile: " + pw, "port: 623", "timeout: 5s", "fenceAfter: 1m0s", "leaseNamespace: fenced-system", "monitorInterval: 5m0s"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("view does not show %q:\n%s", want, stdout)
			}
		}
		if strings.Contains(stdout, "s3cret-password") {
			t.Error("view prints the password file's contents")
		}
		// What view prints is a configuration that validates.
		again := writeFile(t, dir, "again.yaml", stdout)
		if code, out, errOut := runBinary(t, bin, "config", "validate", again); code != exitOK {
			t.Errorf("view's output does not validate: %d\n%s%s", code, out, errOut)
		}
	})
}

// runBinary runs bin with args and returns its exit code and outputs.
func runBinary(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = append(os.Environ(), "FENCED_CONFIG=")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}
