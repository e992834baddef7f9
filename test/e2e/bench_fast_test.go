package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/pkg/taint"
)

// TestRecoveryBenchmarkFast is `make bench-fast` (FENCED_BENCH=1): the
// power-loss benchmark of TestRecoveryBenchmark with gossip.profile fast,
// FENCED_BENCH_ROUNDS times (default 10), after measuring what the fast
// profile's false suspicions cost: the fencer's BMC power reads while no
// node is down, for FENCED_BENCH_REST each (default 3m) at rest, with a
// CPU hog on one machine and with 2 % packet loss on one machine. A read
// is all a false suspicion may cost: no node may be tainted then.
func TestRecoveryBenchmarkFast(t *testing.T) {
	requireBench(t)
	rounds := benchEnvInt(t, "FENCED_BENCH_ROUNDS", 10)
	rest := 3 * time.Minute
	if v := os.Getenv("FENCED_BENCH_REST"); v != "" {
		var err error
		rest, err = time.ParseDuration(v)
		must(t, err)
	}
	ctx := context.Background()
	machines := []string{"cp-1", "w-1", "w-2", "w-3", "w-4"}
	h := harness.Start(ctx, t, harness.Options{
		Machines: machines,
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}, Gossip: "profile: fast"},
	})
	// The disturbed machine is never a victim of the power losses below.
	disturbed := h.Machine("w-3")

	var lines []string
	window := func(name string, start, stop func()) {
		if start != nil {
			start()
		}
		reads0 := powerReads(t, h.Machine("cp-1"))
		t.Logf("false suspicions: %s for %s", name, rest)
		requireNoTaintAnywhere(ctx, t, h, rest)
		reads := powerReads(t, h.Machine("cp-1")) - reads0
		if stop != nil {
			stop()
		}
		nodeHours := float64(len(machines)) * rest.Hours()
		line := fmt.Sprintf("| %s | %.2f | %.0f | %.1f | 0 |", name, nodeHours, reads, reads/nodeHours)
		t.Logf("%s", line)
		lines = append(lines, line)
	}
	time.Sleep(20 * time.Second) // start-up traffic settles
	window("at rest", nil, nil)
	var hogs []*exec.Cmd
	var lossNote string
	window(fmt.Sprintf("CPU hog on %s (2 busy processes in its namespace; the 2 cores are every machine's)", disturbed.Name), func() {
		for range 2 {
			c := disturbed.Host.Command("sh", "-c", "while :; do :; done")
			must(t, c.Start())
			hogs = append(hogs, c)
		}
	}, func() {
		for _, c := range hogs {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	window(fmt.Sprintf("2 %% packet loss on %s (each way, iptables statistic)", disturbed.Name), func() {
		must(t, disturbed.Host.Lose(0.02))
	}, func() {
		dropped, err := disturbed.Host.LossDropped()
		must(t, err)
		t.Logf("packets dropped on %s: %d", disturbed.Name, dropped)
		lossNote = fmt.Sprintf("%d packets dropped on %s in the loss window (all its traffic, gossip and Kubernetes)", dropped, disturbed.Name)
		must(t, disturbed.Host.Lose(0))
	})
	suspicions := "| fast profile, 5 nodes | node-hours | BMC power reads | per node-hour | taints |\n|---|---|---|---|---|\n" + strings.Join(lines, "\n") + "\n\n" + lossNote + "\n"

	runs := powerLossRounds(ctx, t, h, "bench-fast", rounds)
	table := header() + row(fmt.Sprintf("fast (%d runs)", len(runs)), runs)
	t.Logf("recovery after power loss, gossip.profile fast:\n%s", table)
	fmt.Printf("\nrecovery after power loss, confirm-only mode, gossip.profile fast, %d runs, times from the power loss:\n%s\n", len(runs), table)
	fmt.Printf("\nBMC power reads while no node is down (false suspicions), gossip.profile fast, %s per window:\n%s\n", rest, suspicions)
}

// powerReads is the fencer's BMC power-status reads so far, every result
// (the periodic device monitor counts under another op).
func powerReads(t *testing.T, m *harness.Machine) float64 {
	t.Helper()
	text, err := m.Metrics()
	must(t, err)
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, `fenced_bmc_requests_total{op="power-status",`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		must(t, err)
		sum += v
	}
	return sum
}

// requireNoTaintAnywhere fails if any node gets fenced's taint within d.
func requireNoTaintAnywhere(ctx context.Context, t *testing.T, h *harness.Harness, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		nodes, err := h.Cluster.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		must(t, err)
		for _, n := range nodes.Items {
			if taint.HasTaint(&n) {
				t.Fatalf("node %s was tainted while no node was down: %v", n.Name, n.Annotations[taint.AnnotationEvidence])
			}
		}
	}
}

func benchEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	must(t, err)
	return n
}
