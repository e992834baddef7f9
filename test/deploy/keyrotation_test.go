package deploy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"fenced.io/fenced/internal/testbed/cluster"
)

// rotationRunbook is the section of docs/operations.md whose commands
// TestGossipKeyRotationRunbook runs.
const rotationRunbook = "## Rotate the gossip key"

// TestGossipKeyRotationRunbook runs the runbook's commands, as written in
// docs/operations.md, against a real API server holding the Secret that
// docs/install.md creates, and reads the Secret after each step: step 1
// adds the new key beside the old one as "key", step 2 makes it "key" and
// keeps the old one, step 3 leaves the new one alone — each value a key
// the agents take (base64 of 32 bytes), as the Secret volume's files.
func TestGossipKeyRotationRunbook(t *testing.T) {
	kubectl := kubectlPath(t) // skips with -short
	script := runbookScript(t)
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true})
	if _, err := c.CreateNamespace(ctx, namespace); err != nil {
		t.Fatal(err)
	}
	// docs/install.md's one-liner.
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig, "-n", namespace, "create", "secret", "generic",
		"fenced-gossip-key", "--from-literal=key="+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))).CombinedOutput(); err != nil {
		t.Fatalf("creating the Secret: %v\n%s", err, out)
	}

	// After each step, the Secret as it is then.
	dumps := t.TempDir()
	steps := regexp.MustCompile(`(?m)^# ([123])\. `)
	var withDumps strings.Builder
	last := 0
	for _, m := range steps.FindAllStringSubmatchIndex(script, -1) {
		withDumps.WriteString(script[last:m[0]])
		if n := script[m[2]:m[3]]; n != "1" {
			fmt.Fprintf(&withDumps, "kubectl -n %s get secret fenced-gossip-key -o json > %s/after-%c.json\n", namespace, dumps, n[0]-1)
		}
		last = m[0]
	}
	withDumps.WriteString(script[last:])
	fmt.Fprintf(&withDumps, "\nkubectl -n %s get secret fenced-gossip-key -o json > %s/after-3.json\n", namespace, dumps)

	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", withDumps.String())
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the runbook's commands: %v\n%s\n--- script:\n%s", err, out, withDumps.String())
	}

	// The Secret's values, as the agents' files hold them, after each step.
	after := func(step int) map[string]string {
		t.Helper()
		var s struct {
			Data map[string][]byte `json:"data"`
		}
		b, err := os.ReadFile(filepath.Join(dumps, fmt.Sprintf("after-%d.json", step)))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for name, v := range s.Data {
			out[name] = string(v)
			if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(v))); err != nil || len(k) != 32 {
				t.Errorf("after step %d, %s = %q: not base64 of 32 bytes", step, name, v)
			}
		}
		return out
	}
	old := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	s1, s2, s3 := after(1), after(2), after(3)
	next := s1["next"]
	if len(s1) != 2 || s1["key"] != old || next == "" || next == old {
		t.Errorf("after step 1: %d keys, key the old one %v, next a new one %v", len(s1), s1["key"] == old, next != "" && next != old)
	}
	if len(s2) != 2 || s2["key"] != next || s2["previous"] != old {
		t.Errorf("after step 2: %d keys, key the new one %v, previous the old one %v", len(s2), s2["key"] == next, s2["previous"] == old)
	}
	if len(s3) != 1 || s3["key"] != next {
		t.Errorf("after step 3: %d keys, key the new one %v", len(s3), s3["key"] == next)
	}
}

// runbookScript is the first sh block of the runbook's section.
func runbookScript(t *testing.T) string {
	t.Helper()
	doc := string(readFile(t, "docs/operations.md"))
	_, section, ok := strings.Cut(doc, "\n"+rotationRunbook+"\n")
	if !ok {
		t.Fatalf("docs/operations.md has no section %q", rotationRunbook)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatalf("%s has no sh block", rotationRunbook)
	}
	script, _, ok := strings.Cut(block, "```")
	if !ok {
		t.Fatalf("%s: the sh block does not end", rotationRunbook)
	}
	return script
}
