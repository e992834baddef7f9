package taint

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"fenced.io/fenced/pkg/vocab"
)

// The fence history: every taint fenced applied and every one it removed,
// kept in the cluster after the Events about them have expired (an hour by
// default) and after the Node's evidence annotation is gone (unfence removes
// it) — what Pacemaker's `stonith history` keeps. It is a record for
// people: no decision reads it, and a write that fails changes no decision
// (the writers log it and count it, nothing more).
//
// One ConfigMap, HistoryConfigMap in fenced's namespace (the lease
// namespace), one key per node holding that node's entries as a JSON list,
// oldest first. It is bounded twice: the newest HistoryPerNode entries of
// each node, and HistoryMaxBytes of data in all — past that, the oldest
// entries of the whole cluster go first — so the object stays well within
// the API server's 1 MiB.
const (
	HistoryConfigMap = "fenced-history"
	HistoryPerNode   = 20
	HistoryMaxBytes  = 512 << 10
	// historyFieldMax bounds each text of an entry (a reason, an evidence
	// summary), so that one long --reason cannot crowd out the others.
	historyFieldMax = 512
)

// HistoryAction is what an entry records.
type HistoryAction string

// History actions.
const (
	// HistoryFence: the out-of-service taint went on, with evidence.
	HistoryFence HistoryAction = "fence"
	// HistoryUnfence: fenced took its out-of-service taint off.
	HistoryUnfence HistoryAction = "unfence"
	// HistoryNodeDeleted: the Node object of a fenced node was deleted,
	// its taint and evidence with it.
	HistoryNodeDeleted HistoryAction = "node-deleted"
	// HistoryNodeRegistered: a node whose Node object was deleted while
	// fenced registered again, with no taint.
	HistoryNodeRegistered HistoryAction = "node-registered"
)

// seenByEveryFencer reports whether every fencer records a HistoryAction
// of its own accord (each sees a Node come and go), rather than the one
// that acted: only the first of them is kept.
func (a HistoryAction) seenByEveryFencer() bool {
	return a == HistoryNodeDeleted || a == HistoryNodeRegistered
}

// HistoryEntry is one fence or one removal.
type HistoryEntry struct {
	Node   string        `json:"node"`
	Action HistoryAction `json:"action"`
	// At is when the taint went on or came off.
	At time.Time `json:"at"`
	// By is who did it: a fencer's identity, or the operator's
	// ("fenced-confirm/alice", "fenced-unfence/alice").
	By string `json:"by"`
	// Method and Evidence are the evidence of a fence: its method and
	// summary (core.Evidence.Summary).
	Method   vocab.EvidenceMethod `json:"method,omitempty"`
	Evidence string               `json:"evidence,omitempty"`
	// Reason is why: the operator's --reason, the fencer's reason.
	Reason string `json:"reason,omitempty"`
	// Forced: `fenced unfence --force` skipped failed checks.
	Forced bool `json:"forced,omitempty"`
}

// History is the whole record: node name to its entries, oldest first.
type History map[string][]HistoryEntry

// ParseHistory reads the history ConfigMap; an entry list it cannot read is
// skipped (a record for people must not stop at one bad key).
func ParseHistory(cm *corev1.ConfigMap) History {
	h := History{}
	if cm == nil {
		return h
	}
	for node, raw := range cm.Data {
		var entries []HistoryEntry
		if json.Unmarshal([]byte(raw), &entries) == nil {
			h[node] = entries
		}
	}
	return h
}

// Newest returns the entries of node, or of every node when node is "",
// newest first.
func (h History) Newest(node string) []HistoryEntry {
	var out []HistoryEntry
	for n, entries := range h {
		if node == "" || n == node {
			// Each node's list is in the order written: reversed, an entry
			// written later comes first also when the clock gave both the
			// same time.
			for i := len(entries) - 1; i >= 0; i-- {
				out = append(out, entries[i])
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].At.Equal(out[j].At) {
			return out[i].At.After(out[j].At)
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// add appends e and applies both bounds. An entry every fencer records
// for the same change is kept once: the first, when the node's last entry
// is of its kind and within a minute of it.
func (h History) add(e HistoryEntry) {
	e.Reason, e.Evidence = clip(e.Reason), clip(e.Evidence)
	if n := len(h[e.Node]); n > 0 && e.Action.seenByEveryFencer() {
		if last := h[e.Node][n-1]; last.Action == e.Action && e.At.Sub(last.At).Abs() < time.Minute {
			return
		}
	}
	entries := append(h[e.Node], e)
	if len(entries) > HistoryPerNode {
		entries = entries[len(entries)-HistoryPerNode:]
	}
	h[e.Node] = entries
	for h.size() > HistoryMaxBytes {
		h.dropOldest()
	}
}

func (h History) size() int {
	n := 0
	for node, entries := range h {
		b, _ := json.Marshal(entries)
		n += len(node) + len(b)
	}
	return n
}

// dropOldest drops the oldest entry of the whole cluster.
func (h History) dropOldest() {
	oldest := ""
	for node, entries := range h {
		if oldest == "" || entries[0].At.Before(h[oldest][0].At) {
			oldest = node
		}
	}
	if h[oldest] = h[oldest][1:]; len(h[oldest]) == 0 {
		delete(h, oldest)
	}
}

func clip(s string) string {
	if len(s) <= historyFieldMax {
		return s
	}
	return s[:historyFieldMax] + "…"
}

// data is h as the ConfigMap's data.
func (h History) data() (map[string]string, error) {
	d := make(map[string]string, len(h))
	for node, entries := range h {
		b, err := json.Marshal(entries)
		if err != nil {
			return nil, err
		}
		d[node] = string(b)
	}
	return d, nil
}

// AppendHistory adds e to the history ConfigMap in namespace ns, creating
// it when absent; a write that lost a race is retried on what won it. The
// caller bounds it with ctx, and never lets its error change a decision.
func AppendHistory(ctx context.Context, client kubernetes.Interface, ns string, e HistoryEntry) error {
	cms := client.CoreV1().ConfigMaps(ns)
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		cm, err := cms.Get(ctx, HistoryConfigMap, metav1.GetOptions{})
		create := apierrors.IsNotFound(err)
		switch {
		case create:
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: HistoryConfigMap, Namespace: ns,
				Labels: map[string]string{"app.kubernetes.io/name": "fenced"}}}
		case err != nil:
			return err
		}
		h := ParseHistory(cm)
		h.add(e)
		if cm.Data, err = h.data(); err != nil {
			return err
		}
		if create {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		} else {
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("fence history %s/%s: %w", ns, HistoryConfigMap, err)
	}
	return nil
}

// ReadHistory reads the history of node ("" for every node) from namespace
// ns, newest first; no ConfigMap is an empty history.
func ReadHistory(ctx context.Context, client kubernetes.Interface, ns, node string) ([]HistoryEntry, error) {
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, HistoryConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fence history %s/%s: %w", ns, HistoryConfigMap, err)
	}
	return ParseHistory(cm).Newest(node), nil
}
