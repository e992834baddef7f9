package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAgentLogsOnlyJSON runs the built binary as a user does, `fenced agent
// --log-format json`, against an API server that refuses every request
// (403, as when the agent's RBAC is missing), so that client-go's
// reflectors log their failures too: every
// line the process writes must be one JSON object naming the component
// that wrote it. A line of klog's own format among them breaks every log
// pipeline that parses the agent's output.
func TestAgentLogsOnlyJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := buildFenced(t, "fenced")
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the test refuses everything","reason":"Forbidden","code":403}`))
	}))
	t.Cleanup(api.Close)
	kubeconfig := kubeconfigFor(t, dir, api.URL)
	cfg := writeFile(t, dir, "config.yaml", "apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\n")

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, "agent", "--config", cfg, "--kubeconfig", kubeconfig, "--insecure-gossip",
		"--node-name", "node-a", "--gossip-bind-address", "127.0.0.1", "--metrics-address", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(os.Environ(), "FENCED_BOOT_ID=boot-1", "KUBECONFIG=")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Long enough for the reflectors' first failures and a retry.
	time.Sleep(4 * time.Second)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the agent did not stop on SIGTERM; stderr:\n%s", stderr.String())
	}

	var clientGo, lines int
	for name, out := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			lines++
			var rec map[string]any
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Errorf("%s: not a JSON line: %s", name, sc.Text())
				continue
			}
			c, _ := rec["component"].(string)
			if c == "" {
				t.Errorf("%s: no component: %s", name, sc.Text())
			}
			if c == "client-go" {
				clientGo++
			}
		}
	}
	if lines == 0 {
		t.Fatal("the agent logged nothing")
	}
	if clientGo == 0 {
		t.Errorf("no line of client-go's among %d: the test did not make it log; stderr:\n%s", lines, stderr.String())
	}
}
