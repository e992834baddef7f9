package diagnose

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDiagnoseStaysPure keeps the rules free of I/O: API types only, no
// client-go, no processes (net/http arrives with apimachinery's types and
// is not called). The callers gather the objects.
func TestDiagnoseStaysPure(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(d, "k8s.io/client-go"),
			d == "os/exec",
			strings.HasPrefix(d, "fenced.io/fenced/") && d != "fenced.io/fenced/pkg/diagnose" && d != "fenced.io/fenced/pkg/vocab" && d != "fenced.io/fenced/pkg/fencing/core":
			t.Errorf("pkg/diagnose depends on %s", d)
		}
	}
}
