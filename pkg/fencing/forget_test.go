package fencing

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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

// TestDeletedNodeIsForgotten: a fencer that fenced a node and then sees
// its Node deleted keeps nothing about it — no per-node state, no phase
// series in fenced_node_state. A cluster that replaces its nodes would
// otherwise grow the fencer's memory with every name it ever had.
func TestDeletedNodeIsForgotten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	tests := []struct {
		name  string
		mode  vocab.Mode
		power vocab.PowerState
	}{
		{"confirm-only: the BMC reads off", vocab.ModeConfirmOnly, vocab.PowerOff},
		{"power-off: the agent is silent, the fencer switches the node off", vocab.ModePowerOff, vocab.PowerOn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			victim := hostileNode("victim", "boot-1", "127.0.0.9", corev1.ConditionTrue)
			// Two healthy nodes beside it: one node down of three is no storm.
			client := fake.NewClientset(victim, hostileNode("fencer", "boot-f", "127.0.0.1", corev1.ConditionTrue),
				hostileNode("bystander", "boot-b", "127.0.0.2", corev1.ConditionTrue))
			p := testPolicy(tt.mode)
			p.FenceAfter, p.FenceDelay, p.ChallengeInterval = time.Second, time.Second, time.Second
			b := newCountingBMC(tt.power)
			metrics := NewMetrics(prometheus.NewRegistry())
			f := startFencer(t, Config{
				Identity: "fencer", Client: client,
				Inventory: inventoryOf(map[string]device.BMC{"victim": b}, map[string]string{"victim": "test://victim"}),
				Members: stillMembers{"victim": {Name: "victim", State: vocab.MemberDead, Since: time.Now()},
					"fencer": {Name: "fencer", State: vocab.MemberAlive}, "bystander": {Name: "bystander", State: vocab.MemberAlive}},
				Tainter: taint.NewTainter(client, "fencer", nil), Recorder: record.NewFakeRecorder(1000),
				Policy: p, LeaseNamespace: hostileNS, Metrics: metrics, Logger: testLog(t, "fencer"),
				ChallengeTimeout: 100 * time.Millisecond,
			})
			poll.Until(t, 10*time.Second, "the fencer sees the node Ready", func() bool { return len(remembered(f, "victim")) > 0 })

			// The kubelet stops: the node goes NotReady and is fenced.
			n, err := client.CoreV1().Nodes().Get(ctx, "victim", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n.Status.Conditions[0].Status = corev1.ConditionUnknown
			n.Status.Conditions[0].LastTransitionTime = metav1.Now()
			if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitTaintEvidence(t, client, "the node was never fenced")
			poll.Until(t, 10*time.Second, "the fence done", func() bool { return phaseNow(f, "victim") == core.PhaseFenced })
			time.Sleep(time.Second) // its pods force-deleted, its Lease released
			t.Logf("remembered while fenced: %v", remembered(f, "victim"))

			if err := client.CoreV1().Nodes().Delete(ctx, "victim", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, 10*time.Second, "the fencer forgets the deleted node", func() bool { return phaseNow(f, "victim") == "" })
			time.Sleep(500 * time.Millisecond) // anything still running about it ends
			if left := remembered(f, "victim"); len(left) > 0 {
				t.Errorf("the fencer still remembers the deleted node in: %v", left)
			}
			if series := nodeStateSeries(t, metrics, "victim"); len(series) > 0 {
				t.Errorf("fenced_node_state still has the deleted node: %v", series)
			}
		})
	}
}

// remembered names what the fencer keeps about node: its per-node state
// (nodestate.go), field by field.
func remembered(f *Fencer, node string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.state[node]
	if !ok {
		return nil
	}
	in := []string{"state"}
	for what, has := range map[string]bool{
		"target": s.target != nil, "seenReady": s.seenReady, "power": s.power != (core.BMCObs{}),
		"agent": s.agent != (core.AgentObs{}), "renew": s.renew != nil, "written": s.written != nil,
		"podsDeleted": !s.podsDeleted.IsZero(), "misfed": s.misfed,
	} {
		if has {
			in = append(in, what)
		}
	}
	slices.Sort(in[1:])
	return in
}

// phaseNow is node's phase in the fencer ("" when it has no target).
func phaseNow(f *Fencer, node string) core.Phase {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.phaseOf(node)
}

// nodeStateSeries are the phases fenced_node_state has a series of for node.
func nodeStateSeries(t *testing.T, m *Metrics, node string) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	m.NodeState.Collect(ch)
	close(ch)
	var phases []string
	for pm := range ch {
		var d dto.Metric
		if err := pm.Write(&d); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["node"] == node {
			phases = append(phases, labels["state"])
		}
	}
	return phases
}
