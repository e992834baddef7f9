package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/procstat"
	"fenced.io/fenced/internal/testbed/soak"
	"fenced.io/fenced/pkg/fencing/core"
)

// The recovery benchmark is what `make bench` runs (FENCED_BENCH=1); it is
// not part of `make test`. It measures, on the harness with Kubernetes'
// default timings, how fast a StatefulSet with an RWO volume recovers from
// its machine losing power — with fenced, several times, and once without.

// benchRounds is how many power losses a benchmark measures: 5, or
// FENCED_BENCH_ROUNDS (make e2e-matrix takes 3 per Kubernetes version).
func benchRounds(t *testing.T) int {
	t.Helper()
	s := os.Getenv("FENCED_BENCH_ROUNDS")
	if s == "" {
		return 5
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("FENCED_BENCH_ROUNDS=%q: want a number of rounds, 1 or more", s)
	}
	return n
}

func requireBench(t *testing.T) {
	if os.Getenv("FENCED_BENCH") == "" {
		t.Skip("benchmark: run with FENCED_BENCH=1 (make bench)")
	}
}

func TestRecoveryBenchmark(t *testing.T) {
	requireBench(t)
	ctx := context.Background()
	audit := auditOptions(t)
	h := harness.Start(ctx, t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3", "w-4"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}},
		Cluster:  cluster.Options{APIServerArgs: audit.args},
	})
	steadyState(ctx, t, h, audit.log)

	report(t, powerLossRounds(ctx, t, h, "bench", benchRounds(t)))
}

// powerLossRounds pulls the plug of w-1 and w-2 in turn, rounds times,
// measuring each recovery (namespaces prefix-0, prefix-1…).
func powerLossRounds(ctx context.Context, t *testing.T, h *harness.Harness, prefix string, rounds int) []harness.Recovery {
	t.Helper()
	var runs []harness.Recovery
	for i := range rounds {
		victim, spare := "w-1", "w-2"
		if i%2 == 1 {
			victim, spare = spare, victim
		}
		r := measure(ctx, t, h, fmt.Sprintf("%s-%d", prefix, i), victim, spare, 5*time.Minute)
		// Back to a clean state: power on, wait for the taint to go.
		must(t, h.PowerOnRecovery(ctx, &r, victim, time.Now().Add(-r.PodRunning), podTimeout))
		runs = append(runs, r)
		t.Logf("round %d of %d: %+v", i+1, rounds, r)
	}
	return runs
}

// TestRecoveryBenchmarkBMCDark is the power loss that takes the BMC down
// too (a tripped breaker, a pulled cord: every feed of the machine cut),
// with the fencing topology [bmc], [pdu-a, pdu-b]: the BMC gives nothing,
// the PDUs' outlets read off through fence_apc_snmp. Same harness and
// timings as TestRecoveryBenchmark, dual feeds.
func TestRecoveryBenchmarkBMCDark(t *testing.T) {
	requireBench(t)
	ctx := context.Background()
	h := harness.Start(ctx, t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3", "w-4"},
		Feeds:    2,
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}, Topology: "{defaults: [[bmc], [pdu-a, pdu-b]]}"},
	})
	var runs []harness.Recovery
	for i := range benchRounds(t) {
		victim, spare := "w-1", "w-2"
		if i%2 == 1 {
			victim, spare = spare, victim
		}
		sts, oldUID := startWorkload(ctx, t, h, fmt.Sprintf("bench-dark-%d", i), victim, spare)
		waitWriter(t, h, sts.PV, victim, 3)
		r, t0, err := h.FeedLossRecovery(ctx, sts, oldUID, victim, spare, 5*time.Minute)
		must(t, err)
		if r.Recovered() {
			waitWriter(t, h, sts.PV, spare, 3)
		}
		requireSafe(t, h, sts.PV)
		if r.Evidence == nil || r.Evidence.BMC == nil || r.Evidence.BMC.Level != 2 {
			t.Fatalf("round %d: evidence %+v, want the PDU level (2)", i+1, r.Evidence)
		}
		// Feeds back: the BMC answers, the machine boots, the taint goes.
		must(t, h.FeedsBackRecovery(ctx, &r, victim, t0, podTimeout))
		runs = append(runs, r)
		t.Logf("round %d: %+v", i+1, r)
	}
	table := header() + row(fmt.Sprintf("BMC dark (%d runs)", len(runs)), runs)
	t.Logf("recovery after power loss with the BMC dark:\n%s", table)
	fmt.Printf("\nrecovery after power loss with the BMC dark (every feed cut; levels [bmc], [pdu-a, pdu-b], fence_apc_snmp), %d runs, times from the power loss:\n%s\n", len(runs), table)
}

// TestRecoveryBenchmarkWatchdog is the power loss of a node with no power
// device the fencer may use, fenced on its watchdog level with the
// defaults (timeout 10 s, confirm 30 s, orderAfter 12 s): "off /
// ordered" is when the fencer saw its fence order; the taint follows the
// wait (42.8 s) later. Same harness and timings as TestRecoveryBenchmark.
func TestRecoveryBenchmarkWatchdog(t *testing.T) {
	requireBench(t)
	ctx := context.Background()
	workers := []string{"w-1", "w-2", "w-3", "w-4"}
	h := harness.Start(ctx, t, harness.Options{
		Machines: append([]string{"cp-1"}, workers...),
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}, Watchdog: &harness.Watchdog{Machines: workers}},
	})
	for _, name := range workers {
		waitMetric(t, h.Machine(name), "fenced_watchdog_armed 1", podTimeout)
	}
	var runs []harness.Recovery
	for i := range benchRounds(t) {
		victim, spare := "w-1", "w-2"
		if i%2 == 1 {
			victim, spare = spare, victim
		}
		bootBefore := h.Machine(victim).BootID()
		r := measure(ctx, t, h, fmt.Sprintf("bench-watchdog-%d", i), victim, spare, 5*time.Minute)
		if r.Evidence == nil {
			t.Fatalf("round %d: not tainted: %+v", i+1, r)
		}
		requireWatchdogEvidence(t, *r.Evidence, bootBefore, core.DefaultWatchdogTimeout, core.DefaultWatchdogConfirm)
		must(t, h.PowerOnRecovery(ctx, &r, victim, time.Now().Add(-r.PodRunning), podTimeout))
		runs = append(runs, r)
		t.Logf("round %d: %+v", i+1, r)
	}
	table := header() + row(fmt.Sprintf("watchdog (%d runs)", len(runs)), runs)
	t.Logf("recovery after power loss on the watchdog level:\n%s", table)
	fmt.Printf("\nrecovery after power loss, no power device, watchdog level with the defaults (wait %s after the order), %d runs, times from the power loss:\n%s\n",
		core.WatchdogWait(core.WatchdogArm{Timeout: core.DefaultWatchdogTimeout, Confirm: core.DefaultWatchdogConfirm}).Round(100*time.Millisecond), len(runs), table)
}

// TestRecoveryWithoutFencing is the same power loss with no fencer: the
// StatefulSet pod stays Terminating on the dead node and never moves.
func TestRecoveryWithoutFencing(t *testing.T) {
	requireBench(t)
	ctx := context.Background()
	h := harness.Start(ctx, t, harness.Options{Machines: []string{"w-1", "w-2"}})
	r := measure(ctx, t, h, "no-fencer", "w-1", "w-2", 7*time.Minute)
	t.Logf("without fencing:\n%s", row("run without fenced", []harness.Recovery{r}))
	fmt.Printf("\nwithout fenced (Kubernetes %s defaults, capped at 7 min):\n%s\n", h.Cluster.Version, header()+row("no fencer", []harness.Recovery{r}))
}

// measure runs the power-loss scenario once.
func measure(ctx context.Context, t *testing.T, h *harness.Harness, ns, victim, spare string, limit time.Duration) harness.Recovery {
	t.Helper()
	sts, oldUID := startWorkload(ctx, t, h, ns, victim, spare)
	waitWriter(t, h, sts.PV, victim, 3)
	r, _, err := h.PowerLossRecovery(ctx, sts, oldUID, victim, spare, limit)
	must(t, err)
	if r.Recovered() {
		waitWriter(t, h, sts.PV, spare, 3)
	}
	requireSafe(t, h, sts.PV)
	return r
}

func header() string {
	return fmt.Sprintf("%-22s %14s %14s %14s %14s %14s\n", "", "gossip detect", "off / ordered", "tainted", "volume released", "pod Running")
}

func row(name string, runs []harness.Recovery) string {
	col := func(get func(harness.Recovery) time.Duration) (p50, max string) {
		v, all := reached(runs, get)
		if !all {
			return "-", "not recovered"
		}
		return fmt.Sprintf("%.1fs", v.P50().Seconds()), fmt.Sprintf("%.1fs", v.Max().Seconds())
	}
	getters := []func(harness.Recovery) time.Duration{
		func(r harness.Recovery) time.Duration { return r.Detected }, func(r harness.Recovery) time.Duration { return r.PowerOff },
		func(r harness.Recovery) time.Duration { return r.Tainted }, func(r harness.Recovery) time.Duration { return r.VolumeReleased },
		func(r harness.Recovery) time.Duration { return r.PodRunning },
	}
	var p50s, maxs []any
	for _, g := range getters {
		p, m := col(g)
		p50s, maxs = append(p50s, p), append(maxs, m)
	}
	return fmt.Sprintf("%-22s %14s %14s %14s %14s %14s\n", append([]any{name + " p50"}, p50s...)...) +
		fmt.Sprintf("%-22s %14s %14s %14s %14s %14s\n", append([]any{name + " max"}, maxs...)...)
}

func report(t *testing.T, runs []harness.Recovery) {
	table := header() + row(fmt.Sprintf("fenced (%d runs)", len(runs)), runs)
	t.Logf("recovery after power loss:\n%s", table)
	fmt.Printf("\nrecovery after power loss, confirm-only mode, %d runs, times from the power loss:\n%s\n", len(runs), table)
	if path := os.Getenv("FENCED_FIGURES"); path != "" {
		must(t, writeFigures(path, runs))
	}
}

// reached is the time of each run that got to the point get reads (a time
// of 0 is a run that did not); all is false when some run did not.
func reached(runs []harness.Recovery, get func(harness.Recovery) time.Duration) (v soak.Durations, all bool) {
	for _, r := range runs {
		if d := get(r); d > 0 {
			v = append(v, d)
		}
	}
	return v, len(v) == len(runs)
}

// writeFigures writes the medians of runs to path as JSON
// (soak.RecoveryFigures), for make e2e-matrix's table.
func writeFigures(path string, runs []harness.Recovery) error {
	median := func(get func(harness.Recovery) time.Duration) float64 {
		v, all := reached(runs, get)
		if !all {
			return 0 // not every run got there
		}
		return v.P50().Seconds()
	}
	raw, err := json.Marshal(soak.RecoveryFigures{
		Runs:           len(runs),
		Tainted:        median(func(r harness.Recovery) time.Duration { return r.Tainted }),
		VolumeReleased: median(func(r harness.Recovery) time.Duration { return r.VolumeReleased }),
		PodRunning:     median(func(r harness.Recovery) time.Duration { return r.PodRunning }),
	})
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// auditSetup makes the API server log every request of fenced's agents,
// so the benchmark can count them per agent.
type auditSetup struct {
	args []string
	log  string
}

func auditOptions(t *testing.T) auditSetup {
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	must(t, os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["fenced:agents", "fenced:fencers"]
- level: None
`), 0o600))
	log := filepath.Join(dir, "audit.log")
	return auditSetup{args: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + log}, log: log}
}

// steadyState measures the agents at rest for one minute: memory, CPU,
// API requests per agent and BMC requests.
func steadyState(ctx context.Context, t *testing.T, h *harness.Harness, auditLog string) {
	time.Sleep(20 * time.Second) // let start-up traffic settle
	pids := agentPIDs(t)
	cpu0 := map[int]float64{}
	for _, p := range pids {
		cpu0[p] = procstat.CPUSeconds(p)
	}
	bmc0 := metricValue(t, h.Machine("cp-1"), `fenced_bmc_requests_total{op="power-status",result="ok"}`)
	start := time.Now()
	const window = 60 * time.Second
	time.Sleep(window)
	var rss []float64
	var cpu []float64
	for _, p := range pids {
		rss = append(rss, procstat.RSSMB(p))
		cpu = append(cpu, 100*(procstat.CPUSeconds(p)-cpu0[p])/window.Seconds())
	}
	bmc := metricValue(t, h.Machine("cp-1"), `fenced_bmc_requests_total{op="power-status",result="ok"}`) - bmc0
	requests, watches := auditCounts(t, auditLog, start, start.Add(window))
	startup, _ := auditCounts(t, auditLog, time.Time{}, start)
	var lines []string
	lines = append(lines, fmt.Sprintf("agents measured: %d (1 fencer, %d observers) over %s at rest", len(pids), len(pids)-1, window))
	lines = append(lines, fmt.Sprintf("agent RSS MB: median %.1f, max %.1f", median(rss), slices.Max(rss)))
	lines = append(lines, fmt.Sprintf("agent CPU %% of one core: median %.2f, max %.2f", median(cpu), slices.Max(cpu)))
	for _, m := range h.Machines {
		user := harness.AgentUser(m.Name)
		lines = append(lines, fmt.Sprintf("API requests in the minute by %s: %d, watches opened: %d (before the window, at start-up: %d)",
			user, requests[user], watches[user], startup[user]))
	}
	lines = append(lines, fmt.Sprintf("BMC power-status reads in the minute (5 healthy nodes): %v", bmc))
	t.Logf("steady state:\n  %s", strings.Join(lines, "\n  "))
	fmt.Printf("\nsteady state:\n  %s\n", strings.Join(lines, "\n  "))
}

// agentPIDs finds every running fenced agent.
func agentPIDs(t *testing.T) []int {
	entries, err := os.ReadDir("/proc")
	must(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cmd), "fenced\x00agent\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// auditCounts counts, per user, requests completed in [from, to) and
// watch requests started then.
func auditCounts(t *testing.T, path string, from, to time.Time) (requests, watches map[string]int) {
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	requests, watches = map[string]int{}, map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			Stage          string
			Verb           string
			User           struct{ Username string }
			StageTimestamp time.Time
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.StageTimestamp.Before(from) || !e.StageTimestamp.Before(to) {
			continue
		}
		user := e.User.Username
		switch {
		case e.Verb == "watch" && e.Stage == "ResponseStarted":
			watches[user]++
		case e.Stage == "ResponseComplete" && e.Verb != "watch":
			requests[user]++
		}
	}
	return requests, watches
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
