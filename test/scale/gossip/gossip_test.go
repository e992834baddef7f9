package gossip

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/config"
)

// TestSmoke runs the whole measurement on a ring of 5 with one crash, so
// that the benchmark's code is exercised by every `go test`. Its figures
// mean nothing; that the crash is seen by every member does.
func TestSmoke(t *testing.T) {
	res, err := Run(t.Context(), Options{
		Size: 5, Profile: config.GossipProfileFast, Kills: 1, KillBatch: 1,
		Rest: 500 * time.Millisecond, Losses: []float64{0.02}, Hogs: 1,
		Progress: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Detections) != 1 || res.Detections[0].Missed != 0 {
		t.Fatalf("detections %+v, want one crash seen by all 4 others", res.Detections)
	}
	if w := res.Windows[0]; w.Traffic.Packets == 0 || w.CPU == 0 {
		t.Errorf("window at rest counted nothing: %+v", w)
	}
	if w := res.Windows[1]; w.Loss != 0.02 {
		t.Errorf("loss window %+v", w)
	}
	report := Report([]Result{res})
	for _, want := range []string{"| 5 | fast | 1 |", "2% loss", "CPU starved"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

// TestSmokeDilated runs a ring of 5 with its timers stretched 4×: the
// crash is still seen by every member, the figures come back in the
// protocol's time (within the wait the protocol's own timers bound), and
// the report says the ring was dilated.
func TestSmokeDilated(t *testing.T) {
	const dilation = 4
	res, err := Run(t.Context(), Options{
		Size: 5, Profile: config.GossipProfileFast, Kills: 1, KillBatch: 1,
		Rest: 500 * time.Millisecond, Dilation: dilation, Progress: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Detections) != 1 || res.Detections[0].Missed != 0 {
		t.Fatalf("detections %+v, want one crash seen by all 4 others", res.Detections)
	}
	timings := config.GossipProfiles[config.GossipProfileFast]
	if d, bound := res.Detections[0].Last, 6*suspicionTimeout(timings, 5)+20*timings.ProbeInterval; d <= 0 || d > bound {
		t.Errorf("crash seen by all after %s in the protocol's time, want within (0, %s]", d, bound)
	}
	if w := res.Windows[0]; w.Duration < 400*time.Millisecond || w.Duration > 2*time.Second {
		t.Errorf("window at rest lasted %s in the protocol's time, want about the 500ms asked for (%s of wall time)", w.Duration, dilation*500*time.Millisecond)
	}
	if report := Report([]Result{res}); !strings.Contains(report, "| 5 | fast, timers ×4 | 1 |") {
		t.Errorf("report does not say the ring was dilated:\n%s", report)
	}
}

func TestPercentile(t *testing.T) {
	v := []time.Duration{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{.5, 3}, {.99, 5}, {0, 1}, {1, 5}} {
		if got := percentile(v, tc.p); got != tc.want {
			t.Errorf("percentile(%v) = %d, want %d", tc.p, got, tc.want)
		}
	}
	if percentile(nil, .5) != 0 {
		t.Error("percentile of nothing")
	}
}

// TestGossipAtScale is `make bench-gossip` (FENCED_BENCH_GOSSIP=1): rings
// of FENCED_GOSSIP_SIZES members (default 10,100,500,1000) with the
// profile FENCED_GOSSIP_PROFILE (default lan), FENCED_GOSSIP_KILLS
// crashes each (default 20), windows at rest of FENCED_GOSSIP_REST
// (default 60s) at 0 % loss, at each of FENCED_GOSSIP_LOSSES (default
// 0.01,0.05) and with FENCED_GOSSIP_HOGS busy goroutines (default 4),
// every memberlist timer stretched FENCED_GOSSIP_DILATION times (default
// 1; see Options.Dilation). The
// tables go to stdout and are appended to FENCED_GOSSIP_OUT.
func TestGossipAtScale(t *testing.T) {
	if os.Getenv("FENCED_BENCH_GOSSIP") == "" {
		t.Skip("benchmark: run with FENCED_BENCH_GOSSIP=1 (make bench-gossip)")
	}
	sizes := envList(t, "FENCED_GOSSIP_SIZES", "10,100,500,1000", strconv.Atoi)
	losses := envList(t, "FENCED_GOSSIP_LOSSES", "0.01,0.05", func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
	kills := envList(t, "FENCED_GOSSIP_KILLS", "20", strconv.Atoi)[0]
	hogs := envList(t, "FENCED_GOSSIP_HOGS", "4", strconv.Atoi)[0]
	rest := envList(t, "FENCED_GOSSIP_REST", "60s", time.ParseDuration)[0]
	profile := config.GossipProfile(envOr("FENCED_GOSSIP_PROFILE", string(config.GossipProfileLAN)))

	dilation := envList(t, "FENCED_GOSSIP_DILATION", "1", func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })[0]
	build := envList(t, "FENCED_GOSSIP_BUILD_TIMEOUT", "10m", time.ParseDuration)[0]
	out := os.Getenv("FENCED_GOSSIP_OUT")
	header := "make bench-gossip, " + time.Now().UTC().Format(time.DateOnly) + ", profile " + string(profile) + "\n\n"
	// Each ring's tables are written as soon as it is measured: a run cut
	// short keeps what it measured.
	var results []Result
	for _, n := range sizes {
		start := time.Now()
		res, err := Run(t.Context(), Options{
			Size: n, Profile: profile, Kills: kills,
			// A few crashes at once in big rings, to bound the run time;
			// one at a time in small ones, where each is a tenth of it.
			KillBatch: max(1, min(5, n/50)), KillSpacing: time.Second,
			Rest: rest, Losses: losses, Hogs: hogs, Settle: 10 * time.Second, BuildTimeout: build, Dilation: dilation,
			Progress: t.Logf,
		})
		text := Report([]Result{res})
		if err != nil {
			// Not a failure of the code under test: what this machine
			// could not host is a figure too.
			text = fmt.Sprintf("N=%d %s: not measured: %v (%s)\n", n, profile, err, time.Since(start).Round(time.Second))
		} else {
			results = append(results, res)
		}
		t.Logf("N=%d done in %s", n, time.Since(start).Round(time.Second))
		os.Stdout.WriteString("\n" + header + text)
		appendFile(t, out, header+text+"\n")
	}
	if len(results) > 1 {
		os.Stdout.WriteString("\nall rings:\n" + Report(results))
	}
}

// appendFile appends text to the file path (nothing when path is empty).
func appendFile(t *testing.T, path, text string) {
	t.Helper()
	if path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// envList parses the comma-separated list in the environment variable
// name, or def.
func envList[T any](t *testing.T, name, def string, parse func(string) (T, error)) []T {
	t.Helper()
	var out []T
	for _, s := range strings.Split(envOr(name, def), ",") {
		v, err := parse(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, v)
	}
	return out
}
