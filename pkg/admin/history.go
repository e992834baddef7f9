package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"fenced.io/fenced/pkg/printer"
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
// every node), newest first. It only reads. A node with entries is shown
// even when its Node is gone (a replaced machine's fences are what one
// looks for); one with neither entries nor a Node is ErrUnknownNode, a
// typo rather than a node never fenced.
func (o *Operator) History(ctx context.Context, node string) (*HistoryView, error) {
	entries, err := taint.ReadHistory(ctx, o.Client, o.LeaseNamespace, node)
	if err != nil {
		return nil, err
	}
	if node != "" && len(entries) == 0 {
		if _, err := o.getNode(ctx, node); errors.Is(err, ErrUnknownNode) {
			return nil, fmt.Errorf("%w (and it has no entry in %s/%s)", err, o.LeaseNamespace, taint.HistoryConfigMap)
		}
	}
	if entries == nil {
		entries = []taint.HistoryEntry{}
	}
	return &HistoryView{ConfigMap: o.LeaseNamespace + "/" + taint.HistoryConfigMap, Node: node, Entries: entries}, nil
}

// Doc is h as the printers print it (package printer): one row per entry,
// newest first, ages in the table against now; -o name prints node/NAME
// of each node in it, once.
func (h *HistoryView) Doc(now time.Time) printer.Doc {
	var names []string
	for _, e := range h.Entries {
		if !slices.Contains(names, e.Node) {
			names = append(names, e.Node)
		}
	}
	return printer.Doc{Kind: "History", Value: h, Rows: "entries", NameKind: "Node", Names: names,
		Text: func(w io.Writer, o printer.TextOptions) error { return h.writeTable(w, o, now) }}
}

// writeTable prints h as a table, or says that it is empty.
func (h *HistoryView) writeTable(w io.Writer, o printer.TextOptions, now time.Time) error {
	if len(h.Entries) == 0 {
		fmt.Fprintf(w, "No fence recorded in %s", h.ConfigMap)
		if h.Node != "" {
			fmt.Fprintf(w, " for node %s", h.Node)
		}
		fmt.Fprintln(w, ".")
		return nil
	}
	tw := o.Table(w, "AT", "AGE", "NODE", "ACTION", "BY", "EVIDENCE", "REASON")
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
