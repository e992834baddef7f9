package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestSwitches runs the operator's three switches through power losses on
// one harness: dry-run reports the taint it would write and writes none
// (and the real run, once dry-run is switched off, fences at once); an
// excluded node is neither read nor tainted and `fenced status` says
// excluded; a pause set during a power loss holds the taint, and the
// resume lets it through within seconds, without a restart.
func TestSwitches(t *testing.T) {
	start := time.Now()
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}, Policy: `{dryRun: true}`},
	})
	fencer := h.Machine("cp-1")
	client := h.Cluster.Client()
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
	setLabel(ctx, t, h, "w-2", taint.ExcludeLabel, "true")
	must(t, h.Machine("w-2").PowerLoss())
	ev, err = h.WaitEvent(ctx, "default", "w-2", "ExcludedWouldReadPower", taint.ExcludeLabel+"=true", podTimeout)
	must(t, err)
	t.Logf("excluded: %s", ev.Message)
	requireNoTaintFor(ctx, t, h, "w-2", 10*time.Second)
	requireOneEvent(ctx, t, h, "w-2", "ExcludedWouldReadPower")
	if v := metricValue(t, fencer, "fenced_nodes_excluded"); v != 1 {
		t.Errorf("fenced_nodes_excluded = %v", v)
	}
	op := &admin.Operator{Client: client, Out: io.Discard}
	s, err := op.Status(ctx, admin.StatusOptions{})
	must(t, err)
	var table bytes.Buffer
	must(t, printer.Print(&table, "", s.Doc(time.Now())))
	for _, line := range strings.Split(table.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "w-2" && f[len(f)-1] != "excluded" {
			t.Errorf("fenced status row of w-2: %q", line)
		}
	}
	t.Logf("fenced status:\n%s", table.String())

	// 3. The pause, set during a power loss: w-3 is down and its BMC does
	// not answer yet when the operator pauses; the BMC comes back and reads
	// off while paused — no taint; the resume taints it within seconds.
	w3 := h.Machine("w-3")
	w3.BMCDown()
	t.Cleanup(w3.BMCUp)
	must(t, w3.PowerLoss())
	_, err = h.WaitEvent(ctx, "default", "w-3", vocab.EventCannotConfirmPowerState, "timeout", podTimeout)
	must(t, err)
	cms := client.CoreV1().ConfigMaps(harness.LeaseNamespace)
	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: taint.PauseConfigMap},
		Data: map[string]string{taint.PauseKey: "true", taint.PauseReasonKey: "e2e"}}, metav1.CreateOptions{})
	must(t, err)
	waitMetric(t, fencer, "fenced_paused 1", time.Minute)
	_, err = h.WaitEvent(ctx, harness.LeaseNamespace, taint.PauseConfigMap, "FencingPaused", "", podTimeout)
	must(t, err)
	w3.BMCUp()
	ev, err = h.WaitEvent(ctx, "default", "w-3", "PausedWouldTaint", "with bmc-power-off evidence", podTimeout)
	must(t, err)
	t.Logf("paused: %s", ev.Message)
	requireNoTaintFor(ctx, t, h, "w-3", 10*time.Second)
	requireOneEvent(ctx, t, h, "w-3", "PausedWouldTaint")
	cm, err := cms.Get(ctx, taint.PauseConfigMap, metav1.GetOptions{})
	must(t, err)
	cm.Data[taint.PauseKey] = "false"
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	must(t, err)
	resumed := time.Now()
	waitTaint(ctx, t, h, "w-3", true)
	t.Logf("resumed: w-3 tainted %.1fs after the resume; whole test %.0fs", secs(time.Now(), resumed), secs(time.Now(), start))
	_, err = h.WaitEvent(ctx, harness.LeaseNamespace, taint.PauseConfigMap, "FencingResumed", "", podTimeout)
	must(t, err)
}

// setLabel sets a label on a Node.
func setLabel(ctx context.Context, t *testing.T, h *harness.Harness, node, key, value string) {
	t.Helper()
	nodes := h.Cluster.Client().CoreV1().Nodes()
	n, err := nodes.Get(ctx, node, metav1.GetOptions{})
	must(t, err)
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[key] = value
	_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
	must(t, err)
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
