package fencing

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestNodeFencedByANewerFencerIsNotWritten is a rolling upgrade seen from
// a fencer not yet upgraded: a newer fenced fenced the node, its evidence
// in a format this fencer does not read. Through the whole life of that
// fence — the node down, its BMC reading off; the node back, Ready on a
// new boot — this fencer writes nothing at all (no Node, no pod, no
// Lease), switches no power, and says so: the Warning
// EvidenceFromNewerFenced, a log line, and
// fenced_nodes_evidence_newer_format 1. The same fence in the format it
// reads is recovered, taint removed, by the same steps: that is what a
// fencer that read the newer format as its own would do.
//
// Each step is one decision (sync) on the informers' view of the step's
// Node, so what the fencer did about it is all in the clientset's actions
// when sync returns.
func TestNodeFencedByANewerFencerIsNotWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	at := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	body := `"method":"bmc-power-off","by":"cp-new","at":"` + at + `","bootID":"boot-1",` +
		`"bmc":{"power":"off","at":"` + at + `","endpoint":"ipmi://198.18.0.9:623"}`
	for _, tc := range []struct {
		name       string
		annotation string
		newer      bool
	}{
		{"format 2, newer than this fencer", `{"v":2,` + body + `,"quorum":{"required":2}}`, true},
		{"format 1, as every fenced before wrote it", `{` + body + `}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := hostileNode("victim", "boot-1", "127.0.0.9", corev1.ConditionUnknown)
			node.Spec.Taints = []corev1.Taint{{Key: taint.TaintKey, Value: taint.TaintValue, Effect: corev1.TaintEffectNoExecute}}
			node.Annotations = map[string]string{taint.AnnotationAppliedBy: "cp-new", taint.AnnotationEvidence: tc.annotation}
			client := fake.NewClientset(node)
			bmc := newCountingBMC(vocab.PowerOff)
			members := stillMembers{"victim": {Name: "victim", State: vocab.MemberDead, Since: time.Now().Add(-time.Minute)}}
			rec := record.NewFakeRecorder(100)
			log := &lockedLog{}
			metrics := NewMetrics(prometheus.NewRegistry())
			f := newSyncedFencer(t, Config{
				Identity: "cp-old", Client: client,
				Inventory: inventoryOf(map[string]device.BMC{"victim": bmc}, map[string]string{"victim": "test://victim"}),
				Members:   members, Tainter: taint.NewTainter(client, "cp-old", rec), Recorder: rec,
				Policy: testPolicy(vocab.ModePowerOff), LeaseNamespace: hostileNS, Metrics: metrics,
				Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo})),
			})

			// Down: not Ready, dead in gossip, its BMC reading off.
			writes := decide(t, f, client)
			if tc.newer {
				requireNone(t, "the node down", writes)
				if got := warnings(rec); len(got) != 1 || !strings.Contains(got[0], "newer fenced (format 2); leaving node victim alone — upgrade this fencer") {
					t.Errorf("events %q; want one %s", got, vocab.EventEvidenceFromNewerFenced)
				}
				if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "upgrade this fencer") {
					t.Errorf("no warning logged:\n%s", log.String())
				}
				if v := testutil.ToFloat64(metrics.NodesNewerEvidence); v != 1 {
					t.Errorf("fenced_nodes_evidence_newer_format = %v, want 1", v)
				}
			}

			// Back: Ready on a new boot, alive in gossip, no attachment left.
			n := getNode(t, client)
			n.Status.NodeInfo.BootID = "boot-2"
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
			if _, err := client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			members["victim"] = heartbeat.Member{Name: "victim", State: vocab.MemberAlive, Since: time.Now()}
			bmc.power.Store(vocab.PowerOn)
			poll.Until(t, 10*time.Second, "the fencer's informer has the node back", func() bool {
				seen, err := f.nodes.Get("victim")
				return err == nil && seen.Status.NodeInfo.BootID == "boot-2"
			})
			writes = decide(t, f, client)
			if tc.newer {
				requireNone(t, "the node back on a new boot", writes)
				after := getNode(t, client)
				if !taint.HasTaint(after) || after.Annotations[taint.AnnotationEvidence] != tc.annotation {
					t.Errorf("the newer fence changed: taints %v, annotations %v", after.Spec.Taints, after.Annotations)
				}
				if bmc.reads.Load() != 0 || bmc.powerOffs.Load() != 0 {
					t.Errorf("BMC asked %d reads, %d power-offs", bmc.reads.Load(), bmc.powerOffs.Load())
				}
				if got := warnings(rec); len(got) != 0 {
					t.Errorf("the warning again: %q", got)
				}
				return
			}
			if !strings.Contains(fmt.Sprint(writes), "update nodes") || taint.HasTaint(getNode(t, client)) {
				t.Fatalf("a fence in the format this fencer reads was not recovered: writes %v\n%s", writes, log.String())
			}
		})
	}
}

// newSyncedFencer builds a fencer on informers of cfg.Client and starts
// them, but not the fencer's own loop: the test runs each decision.
func newSyncedFencer(t *testing.T, cfg Config) *Fencer {
	t.Helper()
	f, ctx, cancel := newFencerWatching(t, cfg, cfg.Client)
	t.Cleanup(func() {
		cancel()
		f.unwatchKubeletLeases() // opened with sync's context, not cancel's
		f.bg.Wait()              // the BMC calls its decisions started
	})
	if !cache.WaitForCacheSync(ctx.Done(), f.synced...) {
		t.Fatal("informers did not sync")
	}
	return f
}

// decide runs one decision for the victim and returns the writes it made
// (every action of the clientset but reads), as "verb resource" strings.
func decide(t *testing.T, f *Fencer, client *fake.Clientset) []string {
	t.Helper()
	before := len(client.Actions())
	if err := f.sync(context.Background(), "victim"); err != nil {
		t.Fatal(err)
	}
	var writes []string
	for _, a := range client.Actions()[before:] {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		w := a.GetVerb() + " " + a.GetResource().Resource
		if s := a.GetSubresource(); s != "" {
			w += "/" + s
		}
		if d, ok := a.(k8stesting.DeleteAction); ok {
			w += " " + d.GetName()
		}
		writes = append(writes, w)
	}
	return writes
}

func requireNone(t *testing.T, when string, writes []string) {
	t.Helper()
	if len(writes) > 0 {
		t.Fatalf("%s: the fencer wrote %v to a node a newer fenced fenced", when, writes)
	}
}

func getNode(t *testing.T, client *fake.Clientset) *corev1.Node {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// warnings drains rec's Events and returns the EvidenceFromNewerFenced ones.
func warnings(rec *record.FakeRecorder) []string {
	return drainEvents(rec, string(vocab.EventEvidenceFromNewerFenced))
}

// drainEvents drains rec's Events and returns those that contain substr.
func drainEvents(rec *record.FakeRecorder, substr string) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			if strings.Contains(e, substr) {
				out = append(out, e)
			}
		default:
			return out
		}
	}
}

// lockedLog is a log the fencer's goroutines may write to at once.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
