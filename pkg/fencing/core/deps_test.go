package core

import (
	"os/exec"
	"strings"
	"testing"
)

const (
	corePath  = "fenced.io/fenced/pkg/fencing/core"
	vocabPath = "fenced.io/fenced/pkg/vocab"
)

// TestCoreStaysPure holds the core to docs/design.md §3: no Kubernetes, no
// network, no processes — only the standard library and the leaf
// vocabulary (pkg/vocab, which imports nothing). What it needs from the
// world arrives in an Observation; what it wants done leaves as Actions.
//
// Its tests are held to the same outside world: the standard library (they
// may run go list and read the package's files) and the vocabulary, never
// another of fenced's packages — the core's defaults are its own
// (DefaultPolicy), not pkg/config's.
func TestCoreStaysPure(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		// product: the package itself, held to the stricter rule.
		product bool
	}{
		{name: "package", args: []string{"-deps"}, product: true},
		{name: "package and its tests", args: []string{"-deps", "-test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, l := range goListDeps(t, tc.args...) {
				d, standard, _ := strings.Cut(l, " ")
				switch {
				case standard != "true" && !ownOrVocab(d):
					t.Errorf("the decision core (%s) depends on %s, outside the standard library", tc.name, d)
				case strings.Contains(d, "k8s.io"):
					t.Errorf("the decision core (%s) depends on %s", tc.name, d)
				case tc.product && (d == "net" || strings.HasPrefix(d, "net/") || d == "os/exec"):
					t.Errorf("the decision core depends on %s", d)
				}
			}
		})
	}
}

// goListDeps lists "import-path standard" for the core with go list's
// args.
func goListDeps(t *testing.T, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	args = append(append([]string{"list"}, args...), "-f", "{{.ImportPath}} {{.Standard}}", ".")
	out, err := exec.Command(gobin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 {
		t.Fatalf("go %s listed too little:\n%s", strings.Join(args, " "), out)
	}
	return lines
}

// ownOrVocab reports whether import path d is the core, one of its test
// variants ("core [core.test]", "core.test"), or the vocabulary.
func ownOrVocab(d string) bool {
	d, _, _ = strings.Cut(d, " [")
	return d == corePath || d == corePath+".test" || d == vocabPath
}
