package fencing

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestKubeletShuttingDown reads the kubelet's graceful-shutdown report from
// the Ready condition: only a not-Ready condition whose message carries the
// shutdown manager's words counts.
func TestKubeletShuttingDown(t *testing.T) {
	node := func(status corev1.ConditionStatus, msg string) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Message: "node is shutting down"},
			{Type: corev1.NodeReady, Status: status, Reason: "KubeletNotReady", Message: msg},
		}}}
	}
	tests := []struct {
		name string
		n    *corev1.Node
		want bool
	}{
		{"kubelet shutting down", node(corev1.ConditionFalse, "node is shutting down"), true},
		{"among other errors", node(corev1.ConditionFalse, "[container runtime is down, node is shutting down]"), true},
		{"not ready for another reason", node(corev1.ConditionFalse, "container runtime is down"), false},
		{"ready (message ignored)", node(corev1.ConditionTrue, "node is shutting down"), false},
		{"unknown: the kubelet stopped posting", node(corev1.ConditionUnknown, "Kubelet stopped posting node status."), false},
		{"no Ready condition", &corev1.Node{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kubeletShuttingDown(tt.n); got != tt.want {
				t.Errorf("kubeletShuttingDown = %v, want %v", got, tt.want)
			}
			if got := nodeObs(tt.n).ShuttingDown; got != tt.want {
				t.Errorf("nodeObs.ShuttingDown = %v, want %v", got, tt.want)
			}
		})
	}
}
