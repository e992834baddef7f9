// Command testsummary prints the table at the end of `make test`: every
// end-to-end scenario (and any other test slower than -min) with its
// result and seconds, then the totals. It reads the test2json stream that
// gotestsum saved with --jsonfile.
//
// With -watch it prints instead, every interval until it is killed, the
// top-level tests still running in FILE as gotestsum writes it: `make
// test` runs it beside gotestsum, so that a scenario that takes minutes
// never leaves the terminal silent for more than the interval.
//
// Usage: go run ./hack/testsummary [-min 30s] [-scenarios PKG-SUFFIX] FILE
//
//	go run ./hack/testsummary -watch 30s FILE
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
}

type result struct {
	pkg, test string
	action    string
	seconds   float64
}

func main() {
	minDuration := flag.Duration("min", 30*time.Second, "also list tests outside the scenario packages that took at least this long")
	scenarios := flag.String("scenarios", "/test/e2e", "packages whose tests are all listed (suffix of the import path)")
	watchEvery := flag.Duration("watch", 0, "instead of the summary, print the tests still running every this often, until killed")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: testsummary [-min 30s] [-scenarios SUFFIX] FILE | testsummary -watch 30s FILE")
		os.Exit(2)
	}
	if *watchEvery > 0 {
		watch(os.Stdout, flag.Arg(0), *watchEvery)
		return
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	defer f.Close()
	results, pkgs, err := read(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	write(os.Stdout, results, pkgs, *scenarios, minDuration.Seconds())
}

// read collects the final action of every test and package.
func read(r io.Reader) (tests []result, pkgs []result, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue // gotestsum may interleave non-JSON build output
		}
		switch e.Action {
		case "pass", "fail", "skip":
		default:
			continue
		}
		res := result{pkg: e.Package, test: e.Test, action: e.Action, seconds: e.Elapsed}
		if e.Test == "" {
			pkgs = append(pkgs, res)
		} else {
			tests = append(tests, res)
		}
	}
	return tests, pkgs, sc.Err()
}

func write(w io.Writer, tests, pkgs []result, scenarios string, minSeconds float64) {
	var listed []result
	count := map[string]int{}
	for _, t := range tests {
		count[t.action]++
		top := !strings.Contains(t.test, "/")
		if strings.HasSuffix(t.pkg, scenarios) || (top && t.seconds >= minSeconds) || t.action == "fail" {
			listed = append(listed, t)
		}
	}
	sort.SliceStable(listed, func(i, j int) bool {
		if listed[i].pkg != listed[j].pkg {
			return listed[i].pkg < listed[j].pkg
		}
		return listed[i].test < listed[j].test
	})
	fmt.Fprintf(w, "\nEnd-to-end scenarios (%s), failures, and tests over %.0fs:\n", scenarios, minSeconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tSECONDS\tPACKAGE\tTEST")
	for _, t := range listed {
		indent := strings.Repeat("  ", strings.Count(t.test, "/"))
		fmt.Fprintf(tw, "%s\t%7.1f\t%s\t%s%s\n", strings.ToUpper(t.action), t.seconds, shortPkg(t.pkg), indent, t.test)
	}
	_ = tw.Flush()
	pkgCount := map[string]int{}
	var slowest float64
	for _, p := range pkgs {
		pkgCount[p.action]++
		slowest = max(slowest, p.seconds)
	}
	fmt.Fprintf(w, "packages: %d ok, %d failed, %d without tests; tests: %d passed, %d failed, %d skipped; slowest package %.0fs\n",
		pkgCount["pass"], pkgCount["fail"], pkgCount["skip"], count["pass"], count["fail"], count["skip"], slowest)
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "fenced.io/fenced/") }

// watch prints, every interval, what is still running in the test2json
// file at path (which may not exist yet).
func watch(w io.Writer, path string, every time.Duration) {
	start := time.Now()
	for range time.Tick(every) {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		line := stillRunning(f, time.Now(), time.Since(start))
		f.Close()
		if line != "" {
			fmt.Fprintln(w, line)
		}
	}
}

// stillRunning says which top-level tests have started and not ended in
// the stream r, longest-running first, with how long each has run.
func stillRunning(r io.Reader, now time.Time, elapsed time.Duration) string {
	started := map[string]time.Time{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" || strings.Contains(e.Test, "/") {
			continue
		}
		key := shortPkg(e.Package) + "." + e.Test
		switch e.Action {
		case "run":
			started[key] = e.Time
		case "pass", "fail", "skip":
			delete(started, key)
		}
	}
	if len(started) == 0 {
		return ""
	}
	names := make([]string, 0, len(started))
	for k := range started {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return started[names[i]].Before(started[names[j]]) })
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s (%s)", k, now.Sub(started[k]).Round(time.Second))
	}
	return fmt.Sprintf("… %s into the tests, still running: %s", elapsed.Round(time.Second), strings.Join(parts, ", "))
}
