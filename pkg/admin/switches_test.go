package admin

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

const testNS = "fenced-system"

func pauseCM(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: taint.PauseConfigMap, Namespace: testNS}, Data: data}
}

// TestPauseAndResume: what pause and resume write is what the fencer reads
// (taint.Paused), a switch already in place is left alone, and each change
// is recorded with who and why.
func TestPauseAndResume(t *testing.T) {
	for _, tc := range []struct {
		name       string
		objs       []runtime.Object
		pause      bool
		reason     string
		wantPaused bool
		changed    bool
		event      string
	}{
		{"pause, no ConfigMap yet", nil, true, "SAN update", true, true, "Warning " + string(vocab.EventPauseRequested)},
		{"pause again, same reason", []runtime.Object{pauseCM(map[string]string{"paused": "true", "reason": "SAN update"})}, true, "SAN update", true, false, ""},
		{"pause again, new reason", []runtime.Object{pauseCM(map[string]string{"paused": "true", "reason": "old"})}, true, "SAN update", true, true, "Warning " + string(vocab.EventPauseRequested)},
		{"pause a resumed one", []runtime.Object{pauseCM(map[string]string{"paused": "false"})}, true, "SAN update", true, true, "Warning " + string(vocab.EventPauseRequested)},
		{"resume", []runtime.Object{pauseCM(map[string]string{"paused": "TRUE", "reason": "old"})}, false, "done", false, true, "Normal " + string(vocab.EventResumeRequested)},
		{"resume, no ConfigMap", nil, false, "", false, false, ""},
		{"resume, not paused", []runtime.Object{pauseCM(map[string]string{"paused": "false"})}, false, "", false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, tc.objs...)
			e.op.LeaseNamespace = testNS
			turn := e.op.Resume
			if tc.pause {
				turn = e.op.Pause
			}
			c, err := turn(context.Background(), tc.reason)
			if err != nil {
				t.Fatal(err)
			}
			if c.Changed != tc.changed {
				t.Errorf("changed = %v, want %v: %+v", c.Changed, tc.changed, c)
			}
			cm, err := e.cs.CoreV1().ConfigMaps(testNS).Get(context.Background(), taint.PauseConfigMap, metav1.GetOptions{})
			if err != nil && tc.wantPaused {
				t.Fatal(err)
			}
			if err == nil {
				if p, r := taint.Paused(cm); p != tc.wantPaused || (p && r != tc.reason) {
					t.Errorf("the fencer reads paused %v, %q; want %v, %q", p, r, tc.wantPaused, tc.reason)
				}
			}
			evs := e.events()
			if tc.event == "" && (len(evs) != 0 || e.writes() != 0) {
				t.Errorf("nothing to do, yet events %q, %d writes", evs, e.writes())
			}
			if tc.event != "" && !hasEvent(evs, tc.event, "alice", reasonOr(tc.reason)) {
				t.Errorf("events = %q", evs)
			}
			var out strings.Builder
			if err := printer.Print(&out, "text", c.Doc()); err != nil || !strings.Contains(out.String(), "configmap/"+testNS+"/"+taint.PauseConfigMap) {
				t.Errorf("text: %q, %v", out.String(), err)
			}
		})
	}
}

// TestExcludeAndInclude: exclude writes the label the fencer reads
// (taint.ExcludedBy), include removes only fenced's label, and a node that
// medik8s' label excludes stays excluded, which include says.
func TestExcludeAndInclude(t *testing.T) {
	labelled := func(labels map[string]string) *corev1.Node {
		n := newNode("n1", corev1.ConditionTrue)
		n.Labels = labels
		return n
	}
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		exclude     bool
		wantBy      string
		changed     bool
		event, note string
	}{
		{"exclude", nil, true, taint.ExcludeLabel, true, "Warning " + string(vocab.EventNodeExcludedFromFencing), ""},
		{"exclude again", map[string]string{taint.ExcludeLabel: "True"}, true, taint.ExcludeLabel, false, "", ""},
		{"exclude, medik8s too", map[string]string{taint.Medik8sExcludeLabel: "true"}, true, taint.ExcludeLabel, true, "Warning " + string(vocab.EventNodeExcludedFromFencing), ""},
		{"include", map[string]string{taint.ExcludeLabel: "true", "other": "x"}, false, "", true, "Normal " + string(vocab.EventNodeIncludedInFencing), ""},
		{"include, not excluded", nil, false, "", false, "", ""},
		{"include, label says false", map[string]string{taint.ExcludeLabel: "false"}, false, "", true, "Normal " + string(vocab.EventNodeIncludedInFencing), ""},
		{"include, medik8s still excludes", map[string]string{taint.ExcludeLabel: "true", taint.Medik8sExcludeLabel: "true"}, false,
			taint.Medik8sExcludeLabel, true, "Normal " + string(vocab.EventNodeIncludedInFencing), "stays excluded by " + taint.Medik8sExcludeLabel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, labelled(tc.labels))
			turn := e.op.Include
			if tc.exclude {
				turn = e.op.Exclude
			}
			c, err := turn(context.Background(), "n1", "firmware")
			if err != nil {
				t.Fatal(err)
			}
			n := e.node(t, "n1")
			if by := taint.ExcludedBy(n); by != tc.wantBy || c.Changed != tc.changed {
				t.Fatalf("excluded by %q (changed %v), want %q (%v): %+v", by, c.Changed, tc.wantBy, tc.changed, c)
			}
			if tc.labels["other"] != "" && n.Labels["other"] != "x" {
				t.Errorf("other labels lost: %v", n.Labels)
			}
			evs := e.events()
			if tc.event == "" && (len(evs) != 0 || e.writes() != 0) {
				t.Errorf("nothing to do, yet events %q, %d writes", evs, e.writes())
			}
			if tc.event != "" && !hasEvent(evs, tc.event, "alice", "firmware") {
				t.Errorf("events = %q", evs)
			}
			if !strings.Contains(c.Note, tc.note) || (tc.note == "" && c.Note != "") {
				t.Errorf("note = %q, want %q", c.Note, tc.note)
			}
		})
	}
}

// TestUnknownNode: exclude, include and history of a node that does not
// exist are ErrUnknownNode (exit 2), as for confirm and unfence; history
// still shows a node that is gone but has entries.
func TestUnknownNode(t *testing.T) {
	e := newEnv(nil)
	ctx := context.Background()
	if _, err := e.op.Exclude(ctx, "nope", ""); !errors.Is(err, ErrUnknownNode) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("exclude: err = %v", err)
	}
	if _, err := e.op.Include(ctx, "nope", ""); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("include: err = %v", err)
	}
	if _, err := e.op.History(ctx, "nope"); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("history: err = %v", err)
	}
	gone := taint.HistoryEntry{Node: "gone", Action: taint.HistoryFence, At: t0, By: "fencer"}
	if err := taint.AppendHistory(ctx, e.op.Client, e.op.LeaseNamespace, gone); err != nil {
		t.Fatal(err)
	}
	if h, err := e.op.History(ctx, "gone"); err != nil || len(h.Entries) != 1 {
		t.Errorf("history of a deleted Node with an entry: %+v, %v", h, err)
	}
}

// TestConfirmAndUnfenceRecordHistory: confirm and unfence each add an
// entry to the fence history naming the operator; a history that cannot
// be written is said, and changes nothing else.
func TestConfirmAndUnfenceRecordHistory(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(map[bool]string{false: "written", true: "refused"}[refuse], func(t *testing.T) {
			e := newEnv(nil, newNode("n1", corev1.ConditionUnknown))
			e.op.LeaseNamespace = testNS
			if refuse {
				e.cs.PrependReactor("*", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, taint.HistoryConfigMap, errors.New("no"))
				})
			}
			if err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Reason: "PSU dead", Consent: Consent{Yes: true}}); err != nil {
				t.Fatalf("Confirm: %v", err)
			}
			// Back on a new boot, Ready: unfence.
			n := e.node(t, "n1")
			n.Status.NodeInfo.BootID = bootB
			n.Status.Conditions[0].Status = corev1.ConditionTrue
			if _, err := e.cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := e.op.Unfence(context.Background(), UnfenceOptions{Node: "n1", Reason: "back"}); err != nil {
				t.Fatalf("Unfence: %v\n%s", err, e.out)
			}
			if taint.HasTaint(e.node(t, "n1")) {
				t.Fatal("still tainted")
			}
			if refuse {
				if got := strings.Count(e.out.String(), "WARNING: not recorded in the fence history"); got != 2 {
					t.Errorf("%d warnings:\n%s", got, e.out)
				}
				return
			}
			h, err := e.op.History(context.Background(), "n1")
			if err != nil || len(h.Entries) != 2 {
				t.Fatalf("history = %+v, %v", h, err)
			}
			un, fence := h.Entries[0], h.Entries[1]
			if un.Action != taint.HistoryUnfence || un.By != "fenced-unfence/alice" || !strings.Contains(un.Reason, "back") || un.Method != vocab.EvidenceManual {
				t.Errorf("unfence entry = %+v", un)
			}
			if fence.Action != taint.HistoryFence || fence.By != "fenced-confirm/alice" || fence.Reason != "PSU dead" || fence.Method != vocab.EvidenceManual {
				t.Errorf("fence entry = %+v", fence)
			}
			var out strings.Builder
			if err := printer.Print(&out, "", h.Doc(t0)); err != nil || !strings.Contains(out.String(), "unfence") || strings.Index(out.String(), "unfence") > strings.Index(out.String(), " fence ") {
				t.Errorf("table (%v), newest first:\n%s", err, out.String())
			}
		})
	}
}
