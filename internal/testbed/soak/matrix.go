package soak

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// MatrixTest is one end-to-end scenario over the repeated runs of the
// fault matrix (`go test -count=N`): its result in each run, in order.
type MatrixTest struct {
	Name    string
	Results []string // "pass", "fail" or "skip", one per run
	Times   Durations
	// Failures are the failed subtests, "run N: name".
	Failures []string
}

// Passed counts the runs the test passed.
func (m MatrixTest) Passed() int { return count(m.Results, "pass") }

// Failed counts the runs the test failed.
func (m MatrixTest) Failed() int { return count(m.Results, "fail") }

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// Matrix is the fault matrix over every run.
type Matrix struct {
	Tests []MatrixTest
	// Runs is the most results any test has.
	Runs int
}

// Failed reports whether any run of any test failed.
func (m Matrix) Failed() bool {
	for _, t := range m.Tests {
		if t.Failed() > 0 {
			return true
		}
	}
	return false
}

// testEvent is one line of `go test -json` (cmd/test2json).
type testEvent struct {
	Time    time.Time
	Action  string
	Test    string
	Elapsed float64
}

// ReadMatrix reads the test2json stream of the repeated fault matrix. A
// test's k-th result is its result in run k: `go test -count=N` runs every
// test once per run, in order.
func ReadMatrix(r io.Reader) (Matrix, error) {
	byName := map[string]*MatrixTest{}
	var order []string
	// A test's time is from its run event to its result: its Elapsed
	// leaves out its parallel subtests, which run after its function
	// returned.
	started := map[string]time.Time{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e testEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Test == "" {
			continue // build output and package lines
		}
		top, sub, isSub := strings.Cut(e.Test, "/")
		if e.Action == "run" && !isSub {
			started[top] = e.Time
		}
		if e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
			continue
		}
		t, ok := byName[top]
		if !ok {
			t = &MatrixTest{Name: top}
			byName[top] = t
			order = append(order, top)
		}
		if isSub {
			if e.Action == "fail" {
				t.Failures = append(t.Failures, fmt.Sprintf("run %d: %s", len(t.Results)+1, sub))
			}
			continue
		}
		t.Results = append(t.Results, e.Action)
		start := started[top]
		delete(started, top)
		if e.Action != "skip" {
			took := time.Duration(e.Elapsed * float64(time.Second))
			if !start.IsZero() && !e.Time.IsZero() && e.Time.Sub(start) > took {
				took = e.Time.Sub(start)
			}
			t.Times = append(t.Times, took)
		}
	}
	if err := sc.Err(); err != nil {
		return Matrix{}, err
	}
	var m Matrix
	for _, name := range order {
		t := byName[name]
		m.Tests = append(m.Tests, *t)
		m.Runs = max(m.Runs, len(t.Results))
	}
	slices.SortFunc(m.Tests, func(a, b MatrixTest) int { return strings.Compare(a.Name, b.Name) })
	return m, nil
}

// Write prints the matrix as a Markdown table, then the failed subtests.
func (m Matrix) Write(w io.Writer) {
	fmt.Fprintf(w, "fault matrix: %d runs of %d end-to-end tests\n\n", m.Runs, len(m.Tests))
	fmt.Fprintln(w, "| test | passed | failed | seconds p50 / max | results by run |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	passed, runs := 0, 0
	for _, t := range m.Tests {
		fmt.Fprintf(w, "| %s | %d | %d | %.0f / %.0f | %s |\n", t.Name, t.Passed(), t.Failed(),
			t.Times.P50().Seconds(), t.Times.Max().Seconds(), strings.Join(t.Results, " "))
		passed += t.Passed()
		runs += len(t.Results)
	}
	fmt.Fprintf(w, "| **all** | %d | %d | | |\n", passed, runs-passed-skipped(m))
	for _, t := range m.Tests {
		for _, f := range t.Failures {
			fmt.Fprintf(w, "  FAIL %s %s\n", t.Name, f)
		}
	}
}

func skipped(m Matrix) int {
	n := 0
	for _, t := range m.Tests {
		n += count(t.Results, "skip")
	}
	return n
}
