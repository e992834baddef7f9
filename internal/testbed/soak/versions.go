package soak

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// RecoveryFigures are the medians of the recovery benchmark's power losses
// (test/e2e, FENCED_FIGURES), in seconds from the power loss; 0 when not
// every run got there.
type RecoveryFigures struct {
	Runs           int     `json:"runs"`
	Tainted        float64 `json:"taintedSeconds"`
	VolumeReleased float64 `json:"volumeReleasedSeconds"`
	PodRunning     float64 `json:"podRunningSeconds"`
}

// VersionRun is one Kubernetes version's run of the end-to-end scenarios
// (make e2e-matrix).
type VersionRun struct {
	Version string
	Matrix  Matrix
	// Figures are nil when the recovery benchmark did not finish.
	Figures *RecoveryFigures
	Took    time.Duration
	// Err says why the run could not be made (the binaries did not
	// build, go test did not start); Matrix is then empty.
	Err error
}

// Failed reports whether the run could not be made or a scenario failed.
func (v VersionRun) Failed() bool {
	return v.Err != nil || v.Matrix.Failed() || len(v.Matrix.Tests) == 0
}

// Elapsed is the time the matrix's tests took, one after the other.
func (m Matrix) Elapsed() time.Duration {
	var d time.Duration
	for _, t := range m.Tests {
		for _, x := range t.Times {
			d += x
		}
	}
	return d
}

// WriteVersions prints the runs as two Markdown tables — one row per
// version, then one row per scenario with its result on each version —
// and the failed subtests.
func WriteVersions(w io.Writer, runs []VersionRun) {
	fmt.Fprintln(w, "| Kubernetes | scenarios | passed | power loss → tainted / volume released / pod Running (p50) | minutes |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, v := range runs {
		if v.Err != nil {
			fmt.Fprintf(w, "| %s | - | not run: %s | - | %.0f |\n", v.Version, oneLine(v.Err.Error()), v.Took.Minutes())
			continue
		}
		passed, ran := 0, 0
		for _, t := range v.Matrix.Tests {
			passed += t.Passed()
			ran += t.Passed() + t.Failed()
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %.0f |\n", v.Version, ran, passed, v.Figures, v.Took.Minutes())
	}

	var names []string
	seen := map[string]bool{}
	for _, v := range runs {
		for _, t := range v.Matrix.Tests {
			if !seen[t.Name] {
				seen[t.Name] = true
				names = append(names, t.Name)
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "| scenario |")
	for _, v := range runs {
		fmt.Fprintf(w, " %s |", v.Version)
	}
	fmt.Fprint(w, "\n|---|")
	fmt.Fprint(w, strings.Repeat("---|", len(runs)))
	fmt.Fprintln(w)
	for _, name := range names {
		fmt.Fprintf(w, "| %s |", name)
		for _, v := range runs {
			fmt.Fprintf(w, " %s |", v.result(name))
		}
		fmt.Fprintln(w)
	}
	for _, v := range runs {
		for _, t := range v.Matrix.Tests {
			for _, f := range t.Failures {
				fmt.Fprintf(w, "  FAIL %s %s %s\n", v.Version, t.Name, strings.TrimPrefix(f, "run 1: "))
			}
		}
	}
}

// result is a scenario's cell: its result and seconds, or "-" when the
// version did not run it.
func (v VersionRun) result(name string) string {
	for _, t := range v.Matrix.Tests {
		if t.Name != name || len(t.Results) == 0 {
			continue
		}
		r := t.Results[len(t.Results)-1]
		if r == "skip" {
			return "skipped"
		}
		return fmt.Sprintf("%s %.0f s", r, t.Times.Max().Seconds())
	}
	return "-"
}

func (f *RecoveryFigures) String() string {
	if f == nil {
		return "-"
	}
	s := func(x float64) string {
		if x == 0 {
			return "not every run"
		}
		return fmt.Sprintf("%.1f s", x)
	}
	return fmt.Sprintf("%s / %s / %s (%d runs)", s(f.Tainted), s(f.VolumeReleased), s(f.PodRunning), f.Runs)
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
