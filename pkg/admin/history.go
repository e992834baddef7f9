package admin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"fenced.io/fenced/pkg/taint"
)

// historyTimeout bounds a history write of confirm or unfence: the taint is
// already written, and the record must not keep the operator waiting.
const historyTimeout = 10 * time.Second

// recordHistory adds e to the fence history (pkg/taint/history.go). The
// taint is what counts: a history that cannot be written is said out loud
// and logged, and changes nothing else, not even the exit code.
func (o *Operator) recordHistory(ctx context.Context, e taint.HistoryEntry) {
	ctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	if err := taint.AppendHistory(ctx, o.Client, o.LeaseNamespace, e); err != nil {
		fmt.Fprintf(o.Out, "WARNING: not recorded in the fence history: %v (the taint is as said above)\n", err)
		o.log().Warn("fence history entry not written", "node", e.Node, "action", string(e.Action), "err", err)
	}
}

// HistoryView is what `fenced history` prints, and its -o json output.
type HistoryView struct {
	// ConfigMap is where the history is kept.
	ConfigMap string `json:"configMap"`
	// Node is the node asked for; empty: every node.
	Node string `json:"node,omitempty"`
	// Entries are newest first.
	Entries []taint.HistoryEntry `json:"entries"`
}

// History is `fenced history [NODE]`: the fence history of node ("" for
// every node), newest first. It only reads.
func (o *Operator) History(ctx context.Context, node string) (*HistoryView, error) {
	entries, err := taint.ReadHistory(ctx, o.Client, o.LeaseNamespace, node)
	if err != nil {
		return nil, err
	}
	if entries == nil {
		entries = []taint.HistoryEntry{}
	}
	return &HistoryView{ConfigMap: o.LeaseNamespace + "/" + taint.HistoryConfigMap, Node: node, Entries: entries}, nil
}

// Write prints h as a table (newest first, ages against now) or as JSON.
func (h *HistoryView) Write(w io.Writer, format string, now time.Time) error {
	if format == "json" {
		return writeJSON(w, h)
	}
	if len(h.Entries) == 0 {
		fmt.Fprintf(w, "No fence recorded in %s", h.ConfigMap)
		if h.Node != "" {
			fmt.Fprintf(w, " for node %s", h.Node)
		}
		fmt.Fprintln(w, ".")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tAGE\tNODE\tACTION\tBY\tEVIDENCE\tREASON")
	for _, e := range h.Entries {
		action := string(e.Action)
		if e.Forced {
			action += " (forced)"
		}
		evidence := e.Evidence
		if e.Method != "" {
			evidence = strings.TrimSpace(string(e.Method) + ": " + e.Evidence)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), age(e.At, now), e.Node, action,
			dash(e.By), dash(evidence), dash(strings.Join(strings.Fields(e.Reason), " ")))
	}
	return tw.Flush()
}
