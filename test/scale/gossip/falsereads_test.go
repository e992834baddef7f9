package gossip

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(RunFalseReadsChild())
	}
	os.Exit(m.Run())
}

// TestFalseReadsSmoke runs the false-read measurement on 5 agents for a
// few seconds, stalls and loss included, so that its code runs in every
// `go test`. Its counts mean nothing at that size; that the ring settles,
// the child is stalled and reports its scheduling latency, and beats
// arrive, does.
func TestFalseReadsSmoke(t *testing.T) {
	res, err := RunFalseReads(t.Context(), FalseReadOptions{Members: 5, Window: 3 * time.Second, Loss: 0.05,
		Stall: 100 * time.Millisecond, StallEvery: 500 * time.Millisecond, Progress: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stalls == 0 || res.SchedP99 == 0 || res.BeatsPerSecond == 0 {
		t.Errorf("nothing measured: %+v", res)
	}
	t.Logf("%s", res.Row())
}

// TestFalseReads is `make bench-false-reads`: FENCED_FALSE_READS_MEMBERS
// agents (default 100) for FENCED_FALSE_READS_WINDOW (default 30m), 5 %
// loss, stalls of 300ms every 1.5s on average (the agents' scheduling p99
// ≥ 200 ms) and, for comparison, the same without stalls and loss.
func TestFalseReads(t *testing.T) {
	if os.Getenv("FENCED_BENCH_FALSE_READS") == "" {
		t.Skip("a benchmark: make bench-false-reads")
	}
	members, window := 100, 30*time.Minute
	if v := os.Getenv("FENCED_FALSE_READS_MEMBERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		members = n
	}
	if v := os.Getenv("FENCED_FALSE_READS_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		window = d
	}
	var rows []FalseReadResult
	for _, o := range []FalseReadOptions{
		{Members: members, Window: window, Loss: 0.05, Stall: 300 * time.Millisecond, StallEvery: 1500 * time.Millisecond},
	} {
		o.Progress = t.Logf
		res, err := RunFalseReads(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", res.Row())
		rows = append(rows, res)
	}
	table := FalseReadsTable(rows)
	t.Log("\n" + table)
	if out := os.Getenv("FENCED_FALSE_READS_OUT"); out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
