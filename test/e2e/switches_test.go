package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestSwitches runs the operator's three switches through power losses on
// one harness, the exclusion and the pause through the fenced CLI as an
// operator types it: dry-run reports the taint it would write and writes
// none (and the real run, once dry-run is switched off, fences at once);
// a node `fenced exclude` excluded is neither read nor tainted and
// `fenced status` says excluded; a `fenced pause` during a power loss holds
// the taint and `fenced status` says paused, and `fenced resume` lets it
// through within seconds, without a restart. `fenced history` then lists
// each fence with its evidence.
func TestSwitches(t *testing.T) {
	harness.Parallel(t)
	start := time.Now()
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}, Policy: `{dryRun: true}`},
	})
	fencer := h.Machine("cp-1")
	t.Logf("harness up in %.1fs", secs(time.Now(), start))

	// 1. Dry-run through a power loss.
	if v := metricValue(t, fencer, "fenced_dry_run"); v != 1 {
		t.Fatalf("fenced_dry_run = %v", v)
	}
	must(t, h.Machine("w-1").PowerLoss())
	ev, err := h.WaitEvent(ctx, "default", "w-1", "DryRunWouldTaint", "with bmc-power-off evidence", podTimeout)
	must(t, err)
	t.Logf("dry-run: %s", ev.Message)
	if !strings.Contains(ev.Message, "would taint w-1 out-of-service with bmc-power-off evidence: BMC ") {
		t.Errorf("message %q", ev.Message)
	}
	requireNoTaintFor(ctx, t, h, "w-1", 10*time.Second)
	requireOneEvent(ctx, t, h, "w-1", "DryRunWouldTaint")
	if v := metricValue(t, fencer, `fenced_dry_run_actions_total{action="Taint"}`); v != 1 {
		t.Errorf("fenced_dry_run_actions_total{action=Taint} = %v, want 1", v)
	}
	// Out of dry-run (the configuration changed, the agent restarted):
	// the real run does what the dry-run said.
	b, err := os.ReadFile(h.FencerConfigFile())
	must(t, err)
	must(t, os.WriteFile(h.FencerConfigFile(), bytes.Replace(b, []byte("dryRun: true"), []byte("dryRun: false"), 1), 0o600))
	must(t, fencer.RestartAgent())
	restarted := time.Now()
	n := waitTaint(ctx, t, h, "w-1", true)
	if e, ok, err := taint.EvidenceOf(n); !ok || err != nil || e.Method != vocab.EvidenceBMCPowerOff {
		t.Fatalf("evidence after dry-run: %+v %v %v", e, ok, err)
	}
	// (The restarted fencer has not seen w-1 in gossip: it waits for
	// Kubernetes to call w-1 NotReady, up to the node-monitor grace period.)
	t.Logf("out of dry-run: w-1 tainted %.1fs after the fencer's restart", secs(time.Now(), restarted))

	// 2. An excluded node: no read, no taint, and status says so.
	runFenced(ctx, t, h, "exclude", "w-2", "--reason", "e2e: firmware update")
	_, err = h.WaitEvent(ctx, "default", "w-2", vocab.EventNodeExcludedFromFencing, "e2e: firmware update", podTimeout)
	must(t, err)
	must(t, h.Machine("w-2").PowerLoss())
	ev, err = h.WaitEvent(ctx, "default", "w-2", "ExcludedWouldReadPower", taint.ExcludeLabel+"=true", podTimeout)
	must(t, err)
	t.Logf("excluded: %s", ev.Message)
	requireNoTaintFor(ctx, t, h, "w-2", 10*time.Second)
	requireOneEvent(ctx, t, h, "w-2", "ExcludedWouldReadPower")
	if v := metricValue(t, fencer, "fenced_nodes_excluded"); v != 1 {
		t.Errorf("fenced_nodes_excluded = %v", v)
	}
	status := runFenced(ctx, t, h, "status")
	for _, line := range strings.Split(status, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "w-2" && f[len(f)-1] != "excluded" {
			t.Errorf("fenced status row of w-2: %q", line)
		}
	}
	t.Logf("fenced status:\n%s", status)

	// 3. The pause, set during a power loss: w-3 is down and its BMC does
	// not answer yet when the operator pauses; the BMC comes back and reads
	// off while paused — no taint; the resume taints it within seconds.
	w3 := h.Machine("w-3")
	w3.BMCDown()
	t.Cleanup(w3.BMCUp)
	must(t, w3.PowerLoss())
	_, err = h.WaitEvent(ctx, "default", "w-3", vocab.EventCannotConfirmPowerState, "timeout", podTimeout)
	must(t, err)
	runFenced(ctx, t, h, "pause", "--reason", "e2e: SAN maintenance")
	waitMetric(t, fencer, "fenced_paused 1", time.Minute)
	if status := runFenced(ctx, t, h, "status"); !strings.Contains(status, "paused:            YES: e2e: SAN maintenance") {
		t.Errorf("fenced status while paused:\n%s", status)
	}
	_, err = h.WaitEvent(ctx, harness.LeaseNamespace, taint.PauseConfigMap, "FencingPaused", "", podTimeout)
	must(t, err)
	w3.BMCUp()
	ev, err = h.WaitEvent(ctx, "default", "w-3", "PausedWouldTaint", "with bmc-power-off evidence", podTimeout)
	must(t, err)
	t.Logf("paused: %s", ev.Message)
	requireNoTaintFor(ctx, t, h, "w-3", 10*time.Second)
	requireOneEvent(ctx, t, h, "w-3", "PausedWouldTaint")
	runFenced(ctx, t, h, "resume")
	resumed := time.Now()
	waitTaint(ctx, t, h, "w-3", true)
	t.Logf("resumed: w-3 tainted %.1fs after the resume; whole test %.0fs", secs(time.Now(), resumed), secs(time.Now(), start))
	_, err = h.WaitEvent(ctx, harness.LeaseNamespace, taint.PauseConfigMap, "FencingResumed", "", podTimeout)
	must(t, err)

	// 4. The fence history: the fences of w-1 and w-3, by the fencer, with
	// their evidence; none of w-2, which was excluded.
	for node, fenced := range map[string]bool{"w-1": true, "w-2": false, "w-3": true} {
		var view admin.HistoryView
		must(t, json.Unmarshal([]byte(runFenced(ctx, t, h, "history", node, "-o", "json")), &view))
		if !fenced {
			if len(view.Entries) != 0 {
				t.Errorf("history of %s: %+v, want none", node, view.Entries)
			}
			continue
		}
		if len(view.Entries) != 1 {
			t.Fatalf("history of %s: %+v, want one fence", node, view.Entries)
		}
		e := view.Entries[0]
		if e.Node != node || e.Action != taint.HistoryFence || e.Method != vocab.EvidenceBMCPowerOff || !strings.Contains(e.By, "cp-1") {
			t.Errorf("history of %s: %+v, want a fence with bmc-power-off evidence by cp-1's fencer", node, e)
		}
	}
	t.Logf("fenced history:\n%s", runFenced(ctx, t, h, "history"))
}

// runFenced runs the fenced CLI as an operator types it and returns what
// it printed; it fails the test unless the command exits 0.
func runFenced(ctx context.Context, t *testing.T, h *harness.Harness, args ...string) string {
	t.Helper()
	out, errOut, code, err := h.Fenced(ctx, args...)
	if err != nil || code != 0 {
		t.Fatalf("fenced %s: exit %d, %v\n%s%s", strings.Join(args, " "), code, err, out, errOut)
	}
	return out
}

// requireOneEvent fails unless the node has exactly one Event with reason,
// recorded once: what a switch holds is reported once, not in a loop.
func requireOneEvent(ctx context.Context, t *testing.T, h *harness.Harness, node, reason string) {
	t.Helper()
	sel := fields.Set{"involvedObject.name": node, "reason": reason}.AsSelector().String()
	l, err := h.Cluster.Client().CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: sel})
	must(t, err)
	if len(l.Items) != 1 || l.Items[0].Count != 1 {
		t.Errorf("%s Events on %s: %d (count %v), want one, once", reason, node, len(l.Items), counts(l.Items))
	}
}

func counts(evs []corev1.Event) []int32 {
	var c []int32
	for _, e := range evs {
		c = append(c, e.Count)
	}
	return c
}
