package deploy

import (
	"strings"
	"testing"
)

// TestSystemdREADMECredentialStep: the install steps get the host's
// certificate from `fenced credentials issue` (pkg/credentials: a generated
// CSR name, requester/subject/key/lifetime checked before approval; its
// TestSquatOldStepsVersusIssue runs the squat against a real API server),
// never by applying a CSR of a fixed name and approving it by name, which
// approves whatever request a kubelet created under that name first.
func TestSystemdREADMECredentialStep(t *testing.T) {
	const readme = "deploy/systemd/README.md"
	text := string(readFile(t, readme))
	var issue bool
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "fenced" && f[1] == "credentials" && f[2] == "issue":
			issue = true
		case len(f) >= 3 && f[0] == "kubectl" && f[1] == "certificate" && f[2] == "approve":
			t.Errorf("%s approves a CSR by name (%q): whoever created that name first is approved", readme, line)
		case len(f) >= 2 && f[0] == "kubectl" && f[1] == "apply" && strings.Contains(text, "kind: CertificateSigningRequest"):
			t.Errorf("%s applies a CertificateSigningRequest (%q): an apply over a squatted name is a silent no-op", readme, line)
		}
	}
	if !issue {
		t.Errorf("%s: no `fenced credentials issue` step", readme)
	}
	for _, want := range []string{"cannot be revoked", "Renew"} {
		if !strings.Contains(text, want) {
			t.Errorf("%s does not say %q", readme, want)
		}
	}
}
