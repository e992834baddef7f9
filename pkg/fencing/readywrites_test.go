package fencing

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// lifecycleController answers every Ready=False that fenced writes on
// client's Nodes as the node lifecycle controller answers it for a node
// whose kubelet is silent: with Ready=Unknown (at a newer resource
// version). It returns how many answers it wrote.
func lifecycleController(ctx context.Context, t *testing.T, client kubernetes.Interface) *atomic.Int32 {
	t.Helper()
	w, err := client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var answers atomic.Int32
	go func() {
		defer w.Stop()
		rv := 30
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.ResultChan():
				if !ok {
					return
				}
				n, ok := e.Object.(*corev1.Node)
				if c := taint.ReadyCondition(n); !ok || c == nil || c.Status != corev1.ConditionFalse || c.Reason != taint.ReasonPoweredOff {
					continue
				}
				n = n.DeepCopy()
				c := taint.ReadyCondition(n)
				c.Status, c.Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
				rv++
				n.ResourceVersion = strconv.Itoa(rv)
				if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err == nil {
					answers.Add(1)
				}
			}
		}
	}()
	return &answers
}

// TestNoReadyWriteWarOnALaggingInformer: after an API server outage the
// fencer's informer can show a node for a minute as it was before the
// outage — Ready=True — while the API server has moved on. Found on the
// harness: the fencer fenced the node, wrote Ready=False, the node
// lifecycle controller answered with Unknown, and each next decision, made
// on the stale Ready=True, wrote False again (8 writes in 40 s), each taken
// by the controller for a sign of life. Now the fencer writes Ready=False
// once, decides from the Node the write returned, never writes over
// Unknown, and so writes once however often it decides again.
func TestNoReadyWriteWarOnALaggingInformer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The API server has the kubelet's last status (Ready=True, before
	// the power loss); the informer has an older one, and stays there.
	victim := hostileNode("victim", "boot-1", "127.0.0.9", corev1.ConditionTrue)
	victim.ResourceVersion = "20"
	api := fake.NewClientset(victim)
	stale := victim.DeepCopy()
	stale.ResourceVersion = "10"
	lagging := fake.NewClientset(stale)
	answers := lifecycleController(ctx, t, api)
	metrics := NewMetrics(prometheus.NewRegistry())
	startFencerWatching(t, Config{
		Identity: "fencer", Client: api,
		Inventory: inventoryOf(map[string]device.BMC{"victim": newCountingBMC(vocab.PowerOff)}, map[string]string{"victim": "test://victim"}),
		Members:   stillMembers{"victim": {Name: "victim", State: vocab.MemberDead, Since: time.Now()}},
		Tainter:   taint.NewTainter(api, "fencer", nil), Recorder: record.NewFakeRecorder(1000),
		Policy: testPolicy(vocab.ModeConfirmOnly), LeaseNamespace: hostileNS, Metrics: metrics, Logger: testLog(t, "fencer"),
	}, lagging)
	waitTaintEvidence(t, api, "not tainted")
	poll.Until(t, 20*time.Second, "the lifecycle controller's answer to fenced's Ready=False", func() bool { return answers.Load() >= 1 })

	// The fencer decides again and again on the stale Node: every change
	// the informer shows queues it (here a label, at the stale resource
	// version), for three of the core's retry periods.
	for i := range int(3 * core.TaintRetry / (250 * time.Millisecond)) {
		n, err := lagging.CoreV1().Nodes().Get(ctx, "victim", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels = map[string]string{"poke": strconv.Itoa(i)}
		if _, err := lagging.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond) // the pace of the informer's changes, not a wait for an outcome
	}
	writes := 0
	for _, a := range api.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "nodes" && a.GetSubresource() == "status" {
			writes++
		}
	}
	if fenced := writes - int(answers.Load()); fenced != 1 {
		t.Errorf("fenced wrote Ready=False %d times (the controller answered %d times); want once", fenced, answers.Load())
	}
	if v := testutil.ToFloat64(metrics.NotReadyWrites); v != 1 {
		t.Errorf("fenced_not_ready_writes_total = %v, want 1", v)
	}
	n, err := api.CoreV1().Nodes().Get(ctx, "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := taint.ReadyCondition(n); c.Status != corev1.ConditionUnknown {
		t.Errorf("Ready = %s at the end, want the controller's Unknown left alone", c.Status)
	}
}
