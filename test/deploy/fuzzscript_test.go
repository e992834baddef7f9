package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFuzzScriptToleratesOnlyTheDeadlineRace runs hack/fuzz.sh, as
// `make fuzz-short` does, with a stand-in for the go command. Go 1.26's fuzz
// coordinator can race its own -fuzztime deadline on a busy machine and
// fail a target with a bare "context deadline exceeded" and no input
// found; the script then replays the target's corpus as a plain test and
// passes if it is clean. A written failing input, or a corpus that fails,
// still fails the run.
func TestFuzzScriptToleratesOnlyTheDeadlineRace(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	const deadline = `--- FAIL: FuzzX (6.12s)\n    context deadline exceeded\nFAIL\n`
	tests := []struct {
		name      string
		fuzzOut   string // what `go test -fuzz` prints; it exits 1
		replayRC  int    // the exit status of the corpus replay
		wantRC    int
		wantInOut string
	}{
		{"the coordinator's deadline race, corpus clean: passes", deadline, 0, 0, "deadline race only (corpus replayed clean)"},
		{"the deadline race, but the corpus fails: fails", deadline, 1, 1, "fuzz.sh: failed:"},
		{"a failing input written: fails", `--- FAIL: FuzzX (0.10s)\n    --- FAIL: FuzzX (0.00s)\n        x_test.go:3: boom\n    Failing input written to testdata/fuzz/FuzzX/1\n    context deadline exceeded\n`, 0, 1, "fuzz.sh: failed:"},
		{"a crash: fails", `panic: boom\n    context deadline exceeded\n`, 0, 1, "fuzz.sh: failed:"},
	}
	root := repoRoot(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakeGo := filepath.Join(t.TempDir(), "go")
			script := "#!/bin/sh\ncase \"$*\" in *-fuzz*) printf -- '" + tt.fuzzOut + "'; exit 1;; esac\nexit " + string(rune('0'+tt.replayRC)) + "\n"
			if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", filepath.Join(root, "hack", "fuzz.sh"))
			cmd.Env = append(os.Environ(), "GO="+fakeGo, "FUZZTIME=5s")
			out, err := cmd.CombinedOutput()
			rc := 0
			if ee, ok := err.(*exec.ExitError); ok {
				rc = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if rc != tt.wantRC || !strings.Contains(string(out), tt.wantInOut) {
				t.Errorf("fuzz.sh exited %d, want %d, with %q in its output:\n%s", rc, tt.wantRC, tt.wantInOut, out)
			}
		})
	}
}
