// Command e2ematrix runs the core end-to-end scenarios on every supported
// Kubernetes version, one harness at a time, and prints a table of the
// results per version (make e2e-matrix).
//
// For each version it builds (or finds cached) that release's binaries
// with hack/kube-binaries.sh, then runs `go test -json` on test/e2e with
// KUBE_VERSION set, saving the stream to OUT/<version>.json, and the
// recovery benchmark's medians to OUT/<version>.figures.json. Each
// scenario's result is printed as it finishes. A version whose binaries do
// not build, or whose scenarios fail, does not stop the others; the exit
// status is 1 if any did.
//
// Usage: go run ./hack/e2ematrix [-versions v1.36.3,v1.37.2] [-run REGEXP] [-rounds 3] [-out bin/e2e-matrix]
//
// With -report it runs nothing and prints the table of what OUT holds.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/soak"
)

// coreScenarios are the scenarios the matrix runs: power loss (BMC up and
// BMC dark), clean shutdown, hang → power-off, partition, API outage,
// topology, taint removal, the Multi-Attach hazard without fenced, and
// the recovery benchmark for the figures.
var coreScenarios = []string{
	"TestMultiAttach",         // the hazard itself, without fenced
	"TestConfirmOnlyFencing",  // power loss, BMC dark or failing
	"TestPowerOffFencing",     // hang → power-off, partition, storm
	"TestCleanShutdown",       // clean shutdown
	"TestEvidenceFreshness",   // API outage across a power loss
	"TestTopologyConfirmOnly", // PDU levels, dual feeds, mislabelled outlets
	"TestTaintRemovalRace",    // the upstream taint-removal race
	"TestRecoveryBenchmark",   // figures: power loss → volume released
}

func main() {
	versions := flag.String("versions", strings.Join(cluster.SupportedKubeVersions, ","), "Kubernetes releases to run, comma-separated")
	run := flag.String("run", "^("+strings.Join(coreScenarios, "|")+")$", "the scenarios (go test -run)")
	rounds := flag.Int("rounds", 3, "power losses the recovery benchmark measures per version")
	out := flag.String("out", "bin/e2e-matrix", "directory for each version's test2json stream, figures and the table")
	timeout := flag.Duration("timeout", 60*time.Minute, "go test -timeout for each version")
	report := flag.Bool("report", false, "run nothing: print the table of what -out holds")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: e2ematrix [-versions LIST] [-run REGEXP] [-rounds N] [-out DIR] [-report]")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2ematrix:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var runs []soak.VersionRun
	for _, v := range strings.Split(*versions, ",") {
		v = strings.TrimSpace(v)
		var r soak.VersionRun
		if *report {
			r = read(*out, v, 0)
		} else {
			fmt.Printf("e2e-matrix: Kubernetes %s\n", v)
			r = runVersion(ctx, v, *run, *rounds, *timeout, *out)
		}
		runs = append(runs, r)
		if ctx.Err() != nil {
			break
		}
	}

	var table bytes.Buffer
	fmt.Fprintf(&table, "e2e matrix, %s (%s)\n\n", time.Now().UTC().Format("2006-01-02"), hostLine())
	soak.WriteVersions(&table, runs)
	fmt.Print("\n", table.String())
	if err := os.WriteFile(filepath.Join(*out, "matrix.md"), table.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "e2ematrix:", err)
	}
	for _, r := range runs {
		if r.Failed() {
			os.Exit(1)
		}
	}
}

// runVersion builds version's binaries and runs the scenarios on them.
func runVersion(ctx context.Context, version, run string, rounds int, timeout time.Duration, out string) soak.VersionRun {
	start := time.Now()
	build := exec.CommandContext(ctx, "hack/kube-binaries.sh")
	build.Env = append(os.Environ(), "KUBE_VERSION="+version)
	build.Stdout, build.Stderr = io.Discard, os.Stderr
	if err := build.Run(); err != nil {
		return soak.VersionRun{Version: version, Took: time.Since(start), Err: fmt.Errorf("hack/kube-binaries.sh: %w", err)}
	}

	stream := filepath.Join(out, version+".json")
	figures := filepath.Join(out, version+".figures.json")
	_ = os.Remove(figures)
	f, err := os.Create(stream)
	if err != nil {
		return soak.VersionRun{Version: version, Took: time.Since(start), Err: err}
	}
	defer f.Close()
	abs, err := filepath.Abs(figures)
	if err != nil {
		return soak.VersionRun{Version: version, Took: time.Since(start), Err: err}
	}
	test := exec.CommandContext(ctx, "go", "test", "-json", "-count=1", "-timeout", timeout.String(), "-run", run, "./test/e2e/")
	test.Env = append(os.Environ(), "KUBE_VERSION="+version, "FENCED_BENCH=1",
		fmt.Sprintf("FENCED_BENCH_ROUNDS=%d", rounds), "FENCED_FIGURES="+abs)
	test.Stderr = os.Stderr
	pipe, err := test.StdoutPipe()
	if err != nil {
		return soak.VersionRun{Version: version, Took: time.Since(start), Err: err}
	}
	if err := test.Start(); err != nil {
		return soak.VersionRun{Version: version, Took: time.Since(start), Err: err}
	}
	follow(io.TeeReader(pipe, f), version)
	err = test.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return soak.VersionRun{Version: version, Took: time.Since(start), Err: err}
	}
	return read(out, version, time.Since(start))
}

// follow prints each top-level test's result as it finishes, with the
// time since it started (its parallel subtests included).
func follow(r io.Reader, version string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	started := map[string]time.Time{}
	for sc.Scan() {
		var e struct {
			Time   time.Time
			Action string
			Test   string
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" || strings.Contains(e.Test, "/") {
			continue
		}
		switch e.Action {
		case "run":
			started[e.Test] = e.Time
			fmt.Printf("  %s %s started\n", version, e.Test)
		case "pass", "fail", "skip":
			fmt.Printf("  %s %s %s in %.0f s\n", version, e.Test, strings.ToUpper(e.Action), e.Time.Sub(started[e.Test]).Seconds())
		}
	}
}

// read makes version's row from what out holds.
func read(out, version string, took time.Duration) soak.VersionRun {
	r := soak.VersionRun{Version: version, Took: took}
	f, err := os.Open(filepath.Join(out, version+".json"))
	if err != nil {
		r.Err = err
		return r
	}
	defer f.Close()
	if r.Matrix, err = soak.ReadMatrix(f); err != nil {
		r.Err = err
		return r
	}
	if took == 0 {
		r.Took = r.Matrix.Elapsed()
	}
	if raw, err := os.ReadFile(filepath.Join(out, version+".figures.json")); err == nil {
		var fig soak.RecoveryFigures
		if json.Unmarshal(raw, &fig) == nil {
			r.Figures = &fig
		}
	}
	return r
}

// hostLine names the machine the table was made on.
func hostLine() string {
	return fmt.Sprintf("%d CPUs, %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}
