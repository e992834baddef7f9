package fencing

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// waitEvent waits for an Event on rec that contains every one of want,
// and returns it.
func waitEvent(t *testing.T, rec *record.FakeRecorder, want ...string) string {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case e := <-rec.Events:
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(e, w)
			}
			if ok {
				return e
			}
		case <-deadline:
			t.Fatalf("no Event with %q", want)
			return ""
		}
	}
}

// TestFencedNodeDeletedAndRegisteredAgain: a fenced node's Node object is
// deleted, then registers again. Each is an Event — the deletion's on the
// node by name, as its Node is gone — and an entry of the fence history;
// the new Node gets no taint. Registered with the boot it was fenced at, it
// raises the safety alarm.
func TestFencedNodeDeletedAndRegisteredAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	for _, tc := range []struct {
		name, boot string
		want       vocab.EventReason
	}{
		{"a new boot", "boot-2", vocab.EventFencedNodeRegisteredAgain},
		{"the fenced boot", "boot-1", vocab.EventFencedNodeBackWithSameBootID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, client := runFencer(t, newCountingBMC(vocab.PowerOff))
			rec := f.cfg.Recorder.(*record.FakeRecorder)
			ctx := context.Background()
			waitTaintEvidence(t, client, "not tainted")
			waitEvent(t, rec, string(vocab.EventNodeFenced))

			nodes := client.CoreV1().Nodes()
			if err := nodes.Delete(ctx, "victim", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitEvent(t, rec, "Warning "+string(vocab.EventFencedNodeDeleted), "bmc-power-off evidence")

			back := hostileNode("victim", tc.boot, "127.0.0.9", corev1.ConditionTrue)
			if _, err := nodes.Create(ctx, back, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			e := waitEvent(t, rec, string(tc.want))
			t.Logf("%s", e)
			n, err := nodes.Get(ctx, "victim", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if taint.HasTaint(n) {
				t.Error("the taint was carried over to the new Node")
			}
			var actions []taint.HistoryAction
			poll.Until(t, 20*time.Second, "the fence, the deletion and the return in the fence history", func() bool {
				h, err := taint.ReadHistory(ctx, client, hostileNS, "victim")
				if err != nil {
					t.Fatal(err)
				}
				actions = actions[:0]
				for _, e := range h {
					actions = append(actions, e.Action)
				}
				return len(actions) == 3
			})
			if want := []taint.HistoryAction{taint.HistoryNodeRegistered, taint.HistoryNodeDeleted, taint.HistoryFence}; !slices.Equal(actions, want) {
				t.Errorf("history (newest first) %v, want %v", actions, want)
			}
		})
	}
}
