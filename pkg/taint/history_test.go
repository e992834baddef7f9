package taint

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"fenced.io/fenced/pkg/vocab"
)

var h0 = time.Date(2026, 11, 21, 3, 0, 0, 0, time.UTC)

func entry(node string, i int) HistoryEntry {
	return HistoryEntry{Node: node, Action: HistoryFence, At: h0.Add(time.Duration(i) * time.Minute), By: "fencer-1",
		Method: vocab.EvidenceBMCPowerOff, Evidence: "BMC read power off", Reason: fmt.Sprintf("entry %d", i)}
}

// TestHistoryBounds: each node keeps its newest HistoryPerNode entries, the
// whole record at most HistoryMaxBytes (the cluster's oldest go first), and
// a long text is clipped.
func TestHistoryBounds(t *testing.T) {
	h := History{}
	for i := range HistoryPerNode + 5 {
		h.add(entry("a", i))
	}
	if got := h["a"]; len(got) != HistoryPerNode || got[0].Reason != "entry 5" || got[len(got)-1].Reason != fmt.Sprintf("entry %d", HistoryPerNode+4) {
		t.Fatalf("node a keeps %d entries, %q to %q", len(got), got[0].Reason, got[len(got)-1].Reason)
	}

	long := entry("b", 0)
	long.Reason = strings.Repeat("x", 10*historyFieldMax)
	h.add(long)
	if r := h["b"][0].Reason; len(r) > historyFieldMax+len("…") {
		t.Errorf("reason kept at %d bytes", len(r))
	}

	// Many nodes: the oldest entries of the cluster make room.
	big := History{}
	for i := 0; big.size() <= HistoryMaxBytes-1000; i++ {
		e := entry(fmt.Sprintf("node-%04d", i), i)
		e.Reason = strings.Repeat("r", historyFieldMax)
		big.add(e)
	}
	first := big.Newest("")
	newest := entry("node-new", 100000)
	newest.Reason = strings.Repeat("r", historyFieldMax)
	big.add(newest)
	big.add(entry("node-new", 100001))
	if big.size() > HistoryMaxBytes {
		t.Fatalf("size %d > %d", big.size(), HistoryMaxBytes)
	}
	if _, ok := big["node-0000"]; ok {
		t.Error("the cluster's oldest entry was kept")
	}
	if got := big.Newest(""); got[0].At != h0.Add(100001*time.Minute) || len(got) > len(first)+2 {
		t.Errorf("newest = %+v (%d entries, was %d)", got[0], len(got), len(first))
	}
}

// TestAppendHistory: the first write creates the ConfigMap, later ones add
// to it, a conflict is retried on the winner's content, and ReadHistory
// gives newest first, one node or all.
func TestAppendHistory(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	for i, node := range []string{"a", "b", "a"} {
		if err := AppendHistory(ctx, cs, "fenced-system", entry(node, i)); err != nil {
			t.Fatal(err)
		}
	}
	// Someone else writes between our read and our update, once.
	conflicts := 1
	cs.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, HistoryConfigMap, fmt.Errorf("changed"))
		}
		return false, nil, nil
	})
	if err := AppendHistory(ctx, cs, "fenced-system", entry("b", 3)); err != nil {
		t.Fatal(err)
	}
	all, err := ReadHistory(ctx, cs, "fenced-system", "")
	if err != nil || len(all) != 4 || all[0].Reason != "entry 3" || all[3].Reason != "entry 0" {
		t.Fatalf("history = %+v, %v", all, err)
	}
	a, _ := ReadHistory(ctx, cs, "fenced-system", "a")
	if len(a) != 2 || a[0].Reason != "entry 2" {
		t.Fatalf("history of a = %+v", a)
	}
	none, err := ReadHistory(ctx, fake.NewClientset(), "fenced-system", "")
	if err != nil || len(none) != 0 {
		t.Fatalf("no ConfigMap: %v, %v", none, err)
	}
}

// TestParseHistorySkipsWhatItCannotRead: a key someone broke by hand does
// not hide the others.
func TestParseHistorySkipsWhatItCannotRead(t *testing.T) {
	good, _ := json.Marshal([]HistoryEntry{entry("a", 1)})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: HistoryConfigMap}, Data: map[string]string{"a": string(good), "b": "{broken"}}
	if h := ParseHistory(cm); len(h) != 1 || len(h["a"]) != 1 {
		t.Fatalf("parsed %+v", h)
	}
}

// TestHistoryKeepsWhatEveryFencerSeesOnce: every fencer records a fenced
// Node's deletion and its return; the first entry of each stands, the
// others' within a minute are dropped — but a fence is each fencer's own
// act, and a deletion a minute later is another deletion.
func TestHistoryKeepsWhatEveryFencerSeesOnce(t *testing.T) {
	h := History{}
	h.add(entry("a", 0))
	seen := func(action HistoryAction, by string, at time.Time) HistoryEntry {
		return HistoryEntry{Node: "a", Action: action, At: at, By: by}
	}
	for _, e := range []HistoryEntry{
		seen(HistoryNodeDeleted, "fencer-1", h0.Add(time.Hour)),
		seen(HistoryNodeDeleted, "fencer-2", h0.Add(time.Hour+2*time.Second)),
		seen(HistoryNodeRegistered, "fencer-2", h0.Add(2*time.Hour)),
		seen(HistoryNodeRegistered, "fencer-1", h0.Add(2*time.Hour-time.Second)), // a clock a little behind
		seen(HistoryNodeDeleted, "fencer-1", h0.Add(3*time.Hour)),
	} {
		h.add(e)
	}
	var got []string
	for _, e := range h["a"] {
		got = append(got, string(e.Action)+"/"+e.By)
	}
	want := []string{"fence/fencer-1", "node-deleted/fencer-1", "node-registered/fencer-2", "node-deleted/fencer-1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("entries %q, want %q", got, want)
	}
}
