package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/test/harness"
)

// TestConfirmOnlyFencing runs fenced in its default mode: it taints only
// nodes whose BMC reads off.
func TestConfirmOnlyFencing(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: starts a control plane and machines with fenced agents")
	}
	ctx := context.Background()
	h := harness.Start(ctx, t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}},
	})

	t.Run("power loss: tainted with bmc-power-off evidence, workload moves, taint removed after power on", func(t *testing.T) {
		powerLossFencedAndRecovered(ctx, t, h, "w-1", "w-2")
	})
}

func powerLossFencedAndRecovered(ctx context.Context, t *testing.T, h *harness.Harness, victim, spare string) {
	sts, oldPodUID := startWorkload(ctx, t, h, "fenced-power-loss", victim, spare)
	m := h.Machine(victim)
	waitWriter(t, h, sts.PV, victim, 3)
	bootBefore := m.BootID()

	t0 := time.Now()
	must(t, m.PowerLoss())
	ev, err := h.WaitEvent(ctx, "default", victim, "NodeSuspected", "", podTimeout)
	must(t, err)
	tSuspected := time.Now()
	t.Logf("suspected: %s", ev.Message)
	n := waitTaint(ctx, t, h, victim, true)
	tTaint := time.Now()
	evidence, ok, err := taint.EvidenceOf(n)
	if err != nil || !ok || evidence.Method != taint.MethodBMCPowerOff || evidence.BMC == nil || evidence.BMC.Power != "off" || evidence.BootID != bootBefore {
		t.Fatalf("evidence %+v (ok %v, err %v), boot before %s", evidence, ok, err, bootBefore)
	}
	must(t, h.WaitPodGone(ctx, sts.Namespace, sts.PodName(), oldPodUID, podTimeout))
	must(t, h.WaitNoVolumeAttachment(ctx, sts.PV, victim, podTimeout))
	tVAGone := time.Now()
	_, err = h.WaitPodRunning(ctx, sts.Namespace, sts.PodName(), spare, podTimeout)
	must(t, err)
	tRunning := time.Now()
	waitWriter(t, h, sts.PV, spare, 3)
	requireSafe(t, h, sts.PV)
	t.Logf("timeline (power loss at 0): suspected %.1fs, tainted %.1fs, old VolumeAttachment gone %.1fs, pod Running on %s %.1fs",
		secs(tSuspected, t0), secs(tTaint, t0), secs(tVAGone, t0), spare, secs(tRunning, t0))

	// Power back on: new boot, the taint goes away, the node is usable.
	must(t, m.PowerOnViaBMC())
	must(t, h.WaitNodeReady(ctx, victim, podTimeout))
	waitTaint(ctx, t, h, victim, false)
	if m.BootID() == bootBefore {
		t.Fatal("boot ID did not change across the power cycle")
	}
	_, err = h.WaitEvent(ctx, "default", victim, "NodeRecovered", "", podTimeout)
	must(t, err)
}

// waitTaint waits until node has (or no longer has) fenced's out-of-service taint.
func waitTaint(ctx context.Context, t *testing.T, h *harness.Harness, node string, want bool) *corev1.Node {
	t.Helper()
	var n *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		n, err = h.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return (taint.HasTaint(n) && taint.AppliedByFenced(n)) == want, nil
	})
	if err != nil {
		t.Fatalf("node %s: fenced taint present=%v after %s; want %v; taints %v", node, !want, podTimeout, want, taintKeys(n))
	}
	return n
}

func taintKeys(n *corev1.Node) string {
	if n == nil {
		return "?"
	}
	var k []string
	for _, t := range n.Spec.Taints {
		k = append(k, t.Key)
	}
	return strings.Join(k, ",")
}
