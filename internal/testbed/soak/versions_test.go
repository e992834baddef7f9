package soak

import (
	"errors"
	"strings"
	"testing"
)

func TestWriteVersions(t *testing.T) {
	stream := func(lines ...string) Matrix {
		t.Helper()
		m, err := ReadMatrix(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	runs := []VersionRun{
		{Version: "v1.36.3", Matrix: stream(
			`{"Action":"pass","Test":"TestCleanShutdown","Elapsed":61}`,
			`{"Action":"fail","Test":"TestTaintRemovalRace/naive","Elapsed":3}`,
			`{"Action":"fail","Test":"TestTaintRemovalRace","Elapsed":90}`,
		), Figures: &RecoveryFigures{Runs: 3, Tainted: 5.1, VolumeReleased: 6.2, PodRunning: 8.4}},
		{Version: "v1.37.2", Err: errors.New("hack/kube-binaries.sh: exit status 1\nmore")},
	}
	var b strings.Builder
	WriteVersions(&b, runs)
	got := b.String()
	for _, want := range []string{
		"| v1.36.3 | 2 | 1 | 5.1 s / 6.2 s / 8.4 s (3 runs) |",
		"| v1.37.2 | - | not run: hack/kube-binaries.sh: exit status 1 |",
		"| TestCleanShutdown | pass 61 s | - |",
		"| TestTaintRemovalRace | fail 90 s | - |",
		"FAIL v1.36.3 TestTaintRemovalRace naive",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if !runs[0].Failed() || !runs[1].Failed() {
		t.Error("a failed scenario and a version not run must count as failed")
	}
}
