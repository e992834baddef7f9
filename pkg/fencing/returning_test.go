package fencing

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestReturningWaitsForTheControllerManager runs a fencer on a fenced node
// that comes back: it swaps the out-of-service taint for its returning
// taint and cordons the node in one write, keeps the returning taint for
// as long as nothing answers the cordon (here no controller-manager runs),
// and lifts it, with its cordon, once the node lifecycle controller's
// taint shows up.
func TestReturningWaitsForTheControllerManager(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	ctx := context.Background()
	client := fake.NewClientset(hostileNode("victim", "boot-1", "127.0.0.9", corev1.ConditionUnknown))
	nodes := client.CoreV1().Nodes()
	ev := core.Evidence{Method: vocab.EvidenceBMCPowerOff, At: time.Now().Add(-time.Minute), Reason: "BMC read off",
		BMC: &core.Reading{Power: vocab.PowerOff, At: time.Now().Add(-time.Minute), Endpoint: "test://victim"}}
	if _, err := taint.NewTainter(client, "fencer", nil).Apply(ctx, "victim", ev); err != nil {
		t.Fatal(err)
	}
	// Back on a new boot, Ready, nothing attached.
	n, err := nodes.Get(ctx, "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.NodeInfo.BootID = "boot-2"
	n.Status.Conditions[0].Status, n.Status.Conditions[0].LastTransitionTime = corev1.ConditionTrue, metav1.Now()
	if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(1000)
	f := startFencer(t, Config{
		Identity: "fencer", Client: client,
		Inventory: inventoryOf(map[string]device.BMC{"victim": newCountingBMC(vocab.PowerOn)}, map[string]string{"victim": "test://victim"}),
		Members:   stillMembers{"victim": {Name: "victim", State: vocab.MemberAlive, Since: time.Now()}},
		Tainter:   taint.NewTainter(client, "fencer", nil), Recorder: rec,
		Policy: testPolicy(vocab.ModeConfirmOnly), LeaseNamespace: hostileNS, Metrics: NewMetrics(prometheus.NewRegistry()), Logger: testLog(t, "fencer"),
	})
	get := func() *corev1.Node {
		n, err := nodes.Get(ctx, "victim", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	poll.Until(t, 10*time.Second, "the swap", func() bool { return taint.HasReturningTaint(get()) })
	// The removal is in the fence history, with the evidence it ended.
	var removed []taint.HistoryEntry
	poll.Until(t, 10*time.Second, "the history entry", func() bool {
		removed, err = taint.ReadHistory(ctx, client, hostileNS, "victim")
		return err == nil && len(removed) == 1
	})
	if e := removed[0]; e.Action != taint.HistoryUnfence || e.By != "fencer" || e.Method != vocab.EvidenceBMCPowerOff || e.Reason == "" {
		t.Errorf("history entry = %+v", e)
	}
	n = get()
	if taint.HasTaint(n) || !n.Spec.Unschedulable || taint.CordonOf(n).Taint {
		t.Fatalf("after the swap: taints %+v, unschedulable %v", n.Spec.Taints, n.Spec.Unschedulable)
	}
	// Nothing answers: as long as we look, the returning taint stays.
	for since := time.Now(); time.Since(since) < time.Second; time.Sleep(50 * time.Millisecond) {
		if n := get(); !taint.HasReturningTaint(n) || !n.Spec.Unschedulable {
			t.Fatalf("lifted without an answer: %+v", n.Spec)
		}
	}
	if p := phaseNow(f, "victim"); p != core.PhaseReturning {
		t.Fatalf("phase %s, want %s", p, core.PhaseReturning)
	}

	// The node lifecycle controller answers the cordon.
	n = get()
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the lift", func() bool { return !taint.HasReturningTaint(get()) })
	n = get()
	if n.Spec.Unschedulable || n.Annotations[taint.AnnotationReturning] != "" {
		t.Fatalf("after the lift: unschedulable %v, annotations %v", n.Spec.Unschedulable, n.Annotations)
	}
	poll.Until(t, 10*time.Second, "the fencer calls the node healthy", func() bool { return phaseNow(f, "victim") == core.PhaseHealthy })
	recovered := false
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, string(vocab.EventNodeRecovered)) {
			recovered = true
		}
	}
	if !recovered {
		t.Error("no NodeRecovered Event")
	}
}
