package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/taint"
)

// WaitNodeReady waits until node's Ready condition is True.
func (h *Harness) WaitNodeReady(ctx context.Context, node string, timeout time.Duration) error {
	return h.waitNodeCondition(ctx, node, corev1.ConditionTrue, timeout)
}

// WaitNodeNotReady waits until node's Ready condition is False or Unknown.
func (h *Harness) WaitNodeNotReady(ctx context.Context, node string, timeout time.Duration) error {
	return h.waitNodeCondition(ctx, node, corev1.ConditionUnknown, timeout)
}

func (h *Harness) waitNodeCondition(ctx context.Context, node string, want corev1.ConditionStatus, timeout time.Duration) error {
	var last corev1.ConditionStatus = "absent"
	err := poll.UntilContext(ctx, 250*time.Millisecond, timeout, func(ctx context.Context) bool {
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false // not registered yet, or a transient API error
		}
		last = NodeReady(n)
		if want == corev1.ConditionTrue {
			return last == corev1.ConditionTrue
		}
		return last != corev1.ConditionTrue && last != "absent"
	})
	if err != nil {
		return fmt.Errorf("node %s: Ready is %s after %s, waiting for %s", node, last, timeout, want)
	}
	return nil
}

// NodeReady returns the status of the node's Ready condition ("absent" if none).
func NodeReady(n *corev1.Node) corev1.ConditionStatus {
	if c := taint.ReadyCondition(n); c != nil {
		return c.Status
	}
	return "absent"
}

func jsonArgv(procs [][]string) string {
	b, _ := json.Marshal(procs)
	return string(b)
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}
