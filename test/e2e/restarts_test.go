package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// auditPolicy records every write of a Node's status with its request
// body: who set the Ready condition to what, and when.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  verbs: ["update", "patch"]
  resources: [{group: "", resources: ["nodes/status"]}]
- level: None
`

// readyWrite is one write of a Node's Ready condition, from the API
// server's audit log.
type readyWrite struct {
	at             time.Time
	user, agent    string
	status, reason string
}

func (w readyWrite) String() string {
	return fmt.Sprintf("%s %s/%s by %s (%s)", w.at.Format("15:04:05.000"), w.status, w.reason, w.user, w.agent)
}

// readyWrites reads from the audit log at path the successful writes of
// node's Ready condition, in the order the API server took them.
func readyWrites(t *testing.T, path, node string) []readyWrite {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []readyWrite
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e struct {
			Stage     string `json:"stage"`
			ObjectRef struct {
				Resource, Name, Subresource string
			} `json:"objectRef"`
			User struct {
				Username string `json:"username"`
			} `json:"user"`
			UserAgent      string `json:"userAgent"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			RequestObject struct {
				Status struct {
					Conditions []corev1.NodeCondition `json:"conditions"`
				} `json:"status"`
			} `json:"requestObject"`
			Received metav1.MicroTime `json:"requestReceivedTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log %s: %v", path, err)
		}
		if e.Stage != "ResponseComplete" || e.ObjectRef.Name != node || e.ObjectRef.Subresource != "status" || e.ResponseStatus.Code >= 300 {
			continue
		}
		for _, c := range e.RequestObject.Status.Conditions {
			if c.Type == corev1.NodeReady {
				out = append(out, readyWrite{at: e.Received.Time, user: e.User.Username, agent: e.UserAgent, status: string(c.Status), reason: c.Reason})
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadyWrittenOnceAcrossAnAPIOutage: a node loses power and the API
// server is away for 40 s right after. Found on the harness before: for
// about 84 s after such an outage the fencer decided on a stale Node that
// still said Ready=True and wrote Ready=False 8 times in 40 s, each right
// after the node lifecycle controller had set Unknown — which took the
// writes for signs of life. Counted from the API server's audit log: fenced
// writes Ready=False at most once for the fence, and never after the
// controller has said Unknown.
func TestReadyWrittenOnceAcrossAnAPIOutage(t *testing.T) {
	harness.Parallel(t)
	dir := t.TempDir()
	policy, auditLog := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	must(t, os.WriteFile(policy, []byte(auditPolicy), 0o600))
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}},
		Cluster:  cluster.Options{APIServerArgs: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog}},
	})
	fencer, victim := h.Machine("cp-1"), "w-1"
	must(t, h.Machine(victim).PowerLoss())
	h.Cluster.StopAPIServer()
	t.Cleanup(func() {
		if h.Cluster.APIServerDown() {
			_ = h.Cluster.StartAPIServer(ctx)
		}
	})
	// The outage's length is the scenario, not a wait for an outcome.
	time.Sleep(40 * time.Second)
	must(t, h.Cluster.StartAPIServer(ctx))
	back := time.Now()
	waitTaint(ctx, t, h, victim, true)
	tainted := time.Now()

	// fenced's writes of False, by its client (every other writer of the
	// status — the attach/detach controller's volumesAttached, say —
	// carries the condition as it is); the controller's of Unknown.
	judge := func(writes []readyWrite) (fenced []readyWrite, firstUnknown time.Time) {
		for _, w := range writes {
			switch {
			case strings.HasPrefix(w.agent, "fenced/") && w.status == string(corev1.ConditionFalse):
				fenced = append(fenced, w)
			case strings.HasPrefix(w.agent, "kube-controller-manager/") && w.status == string(corev1.ConditionUnknown) && firstUnknown.IsZero():
				firstUnknown = w.at
			}
		}
		return fenced, firstUnknown
	}
	// Watched until the lifecycle controller has said Unknown and for 90 s
	// after the API server's return: longer than the stale view lasted.
	var writes []readyWrite
	poll.Until(t, podTimeout, "the node lifecycle controller's Unknown, and 90 s after the API server's return", func() bool {
		writes = readyWrites(t, auditLog, victim)
		fenced, unknown := judge(writes)
		if len(fenced) > 1 {
			t.Fatalf("fenced wrote Ready=False %d times: %v", len(fenced), writes)
		}
		return !unknown.IsZero() && time.Since(back) > 90*time.Second
	})
	fenced, unknown := judge(writes)
	for _, w := range fenced {
		if w.at.After(unknown) {
			t.Errorf("fenced wrote Ready=False at %s, after the node lifecycle controller said Unknown at %s: %v", w.at.Format("15:04:05.000"), unknown.Format("15:04:05.000"), writes)
		}
	}
	if v := metricValue(t, fencer, "fenced_not_ready_writes_total"); int(v) != len(fenced) {
		t.Errorf("fenced_not_ready_writes_total = %v, the audit log has %d", v, len(fenced))
	}
	t.Logf("power loss, API away 40 s: tainted %.1fs after its return; Ready=False written by fenced %d time(s), the controller's first Unknown %.1fs after the return; all writes of %s's Ready: %v",
		secs(tainted, back), len(fenced), secs(unknown, back), victim, writes)
}

// fencedWarnings are the Warning Events fenced's agents recorded since.
func fencedWarnings(ctx context.Context, t *testing.T, h *harness.Harness, since time.Time) []string {
	t.Helper()
	evs, err := h.Cluster.Client().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	must(t, err)
	var out []string
	for _, e := range evs.Items {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if e.Source.Component == "fenced" && !last.Before(since.Truncate(time.Second)) {
			out = append(out, e.InvolvedObject.Name+": "+e.Reason+" "+e.Message)
		}
	}
	return out
}

// TestAgentRolloutIsQuiet restarts every agent, fencers included, one
// after the other as a DaemonSet rollout does (SIGTERM, the next once the
// last is back in the ring). Before, each worker's restart cost a power
// read and two Warnings (NodeSuspected, NodeUnresponsiveButPoweredOn):
// every agent announces its restart in its own signed word now, and while
// its kubelet is Ready the fencers leave its node alone. Then a power loss
// is fenced as usual.
func TestAgentRolloutIsQuiet(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "cp-2", "w-1", "w-2", "w-3"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1", "cp-2"}},
	})
	start := time.Now()
	order := []string{"w-1", "w-2", "w-3", "cp-2", "cp-1"}
	for _, name := range order {
		m := h.Machine(name)
		must(t, m.StopAndRestartAgent())
		must(t, h.WaitRingConverged(ctx, podTimeout))
		t.Logf("%s's agent restarted and back in every fencer's ring %.1fs into the rollout", name, secs(time.Now(), start))
	}
	rolled := time.Now()
	for _, f := range []string{"cp-1", "cp-2"} {
		for _, name := range order {
			if reads := bmcRequestsFor(h.Machine(f), name, start); len(reads) > 0 {
				t.Errorf("fencer %s read %s's power during the rollout: %q", f, name, reads)
			}
		}
	}
	// Each agent said why it left: the word the fencers went by.
	for _, name := range order {
		said := false
		for _, l := range strings.Split(h.Machine(name).AgentLog(), "\n") {
			said = said || strings.Contains(l, "announced a restart before leaving the gossip ring") && lineAfter(l, start)
		}
		if !said {
			t.Errorf("%s's agent did not announce its restart", name)
		}
	}
	if w := fencedWarnings(ctx, t, h, start); len(w) > 0 {
		t.Errorf("%d Warning Event(s) during the rollout: %q", len(w), w)
	}

	// A power loss right after: fenced as usual.
	victim := h.Machine("w-2")
	must(t, victim.PowerLoss())
	lost := time.Now()
	n := waitTaint(ctx, t, h, "w-2", true)
	ev, ok, err := taint.EvidenceOf(n)
	if !ok || err != nil || ev.Method != vocab.EvidenceBMCPowerOff {
		t.Fatalf("evidence %+v (%v, %v)", ev, ok, err)
	}
	t.Logf("rollout of %d agents in %.1fs: no power read, no Warning; then a power loss tainted %.1fs after it", len(order), secs(rolled, start), secs(time.Now(), lost))
}

// TestFencedNodeDeletedAndRegisteredAgain: a fenced node's Node object is
// deleted (kubectl delete node) while it is off, and it registers again
// when it is switched on: an Event for each, and entries in the fence
// history; the taint is not carried over to the new Node.
func TestFencedNodeDeletedAndRegisteredAgain(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}},
	})
	victim := h.Machine("w-1")
	boot := victim.BootID()
	must(t, victim.PowerLoss())
	waitTaint(ctx, t, h, "w-1", true)

	_, err := h.Kubectl(ctx, "delete", "node", "w-1")
	must(t, err)
	ev, err := h.WaitEvent(ctx, "default", "w-1", vocab.EventFencedNodeDeleted, "bmc-power-off evidence", podTimeout)
	must(t, err)
	t.Logf("deleted: %s", ev.Message)

	must(t, victim.PowerOnViaBMC())
	must(t, h.WaitNodeReady(ctx, "w-1", podTimeout))
	ev, err = h.WaitEvent(ctx, "default", "w-1", vocab.EventFencedNodeRegisteredAgain, "no taint carried over", podTimeout)
	must(t, err)
	t.Logf("registered again: %s", ev.Message)
	if victim.BootID() == boot {
		t.Fatal("the machine did not reboot")
	}
	requireNoTaintFor(ctx, t, h, "w-1", 10*time.Second)

	out := runFenced(ctx, t, h, "history", "w-1", "-o", "json")
	var view admin.HistoryView
	must(t, json.Unmarshal([]byte(out), &view))
	var actions []taint.HistoryAction
	for _, e := range view.Entries {
		actions = append(actions, e.Action)
	}
	if want := []taint.HistoryAction{taint.HistoryNodeRegistered, taint.HistoryNodeDeleted, taint.HistoryFence}; !slices.Equal(actions, want) {
		t.Errorf("fence history of w-1 (newest first): %v, want %v", actions, want)
	}
}
