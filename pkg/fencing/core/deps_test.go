package core

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreStaysPure holds the core to docs/design.md §3: no Kubernetes, no
// network, no processes — only the standard library and the leaf
// vocabulary (pkg/vocab, which imports nothing). What it needs from the
// world arrives in an Observation; what it wants done leaves as Actions.
func TestCoreStaysPure(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 {
		t.Fatalf("go list -deps listed too little:\n%s", out)
	}
	for _, l := range lines {
		d, standard, _ := strings.Cut(l, " ")
		switch {
		case standard != "true" && d != "fenced.io/fenced/pkg/fencing/core" && d != "fenced.io/fenced/pkg/vocab":
			t.Errorf("the decision core depends on %s, outside the standard library", d)
		case strings.Contains(d, "k8s.io"),
			d == "net", strings.HasPrefix(d, "net/"),
			d == "os/exec":
			t.Errorf("the decision core depends on %s", d)
		}
	}
}
