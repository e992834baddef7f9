package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// The operator's switches that live in the cluster, as `fenced pause`,
// `fenced resume`, `fenced exclude` and `fenced include` turn them: they
// write exactly what the fencers read (pkg/taint/switches.go: the pause
// ConfigMap in the lease namespace, the exclusion label on the Node), so
// the words are pkg/taint's and nothing here restates them. Each is
// idempotent, says what changed, and records who turned it in an Event.
// None of them can lead to a taint or a power action: a pause and an
// exclusion only hold the fencers back, and a resume or an include only
// lets them do what their evidence rules allow.

// SwitchChange is what one of the switch commands did, and its -o json
// output.
type SwitchChange struct {
	// Switch is "pause" or "exclusion".
	Switch string `json:"switch"`
	// Object is what was written: "configmap/<ns>/fenced-pause" or
	// "node/<name>".
	Object string `json:"object"`
	// Changed says whether anything was written.
	Changed bool `json:"changed"`
	// Before and After describe the switch ("paused: SAN update",
	// "not paused", "excluded (fenced.io/exclude=true)", "included").
	Before string `json:"before"`
	After  string `json:"after"`
	// Note is what the operator should know besides (another label
	// still excludes the node).
	Note string `json:"note,omitempty"`
	// By is who the API server says ran it, when something changed.
	By string `json:"by,omitempty"`
}

// Doc is c as the printers print it (package printer); -o name prints
// what was written (configmap/fenced-pause, node/NAME).
func (c SwitchChange) Doc() printer.Doc {
	kind, name := "ConfigMap", taint.PauseConfigMap
	if c.Switch == switchExclusion {
		kind, name = "Node", strings.TrimPrefix(c.Object, "node/")
	}
	return printer.Doc{Kind: "SwitchChange", Value: c, NameKind: kind, Names: []string{name},
		Text: func(w io.Writer, _ printer.TextOptions) error { return c.writeText(w) }}
}

// writeText prints what changed, in a line, and the note.
func (c SwitchChange) writeText(w io.Writer) error {
	if c.Changed {
		fmt.Fprintf(w, "%s: %s -> %s\n", c.Object, c.Before, c.After)
	} else {
		fmt.Fprintf(w, "%s: %s already: nothing changed\n", c.Object, c.After)
	}
	if c.Note != "" {
		fmt.Fprintln(w, c.Note)
	}
	return nil
}

const (
	switchPause     = "pause"
	switchExclusion = "exclusion"
)

func pauseText(paused bool, reason string) string {
	switch {
	case !paused:
		return "not paused"
	case reason == "":
		return "paused"
	}
	return "paused: " + reason
}

// Pause is `fenced pause`: the pause ConfigMap says paused, with reason.
// Pausing again with another reason changes only the reason.
func (o *Operator) Pause(ctx context.Context, reason string) (SwitchChange, error) {
	return o.setPause(ctx, true, reason)
}

// Resume is `fenced resume`: the pause ConfigMap says not paused (kept,
// with "false", so that its Events stay with it); no ConfigMap is no pause.
func (o *Operator) Resume(ctx context.Context, reason string) (SwitchChange, error) {
	return o.setPause(ctx, false, reason)
}

func (o *Operator) setPause(ctx context.Context, paused bool, reason string) (SwitchChange, error) {
	cms := o.Client.CoreV1().ConfigMaps(o.LeaseNamespace)
	c := SwitchChange{Switch: switchPause, Object: "configmap/" + o.LeaseNamespace + "/" + taint.PauseConfigMap}
	var written *corev1.ConfigMap
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, taint.PauseConfigMap, metav1.GetOptions{})
		create := apierrors.IsNotFound(err)
		switch {
		case create:
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: taint.PauseConfigMap, Namespace: o.LeaseNamespace}}
		case err != nil:
			return err
		}
		was, wasReason := taint.Paused(cm)
		c.Before = pauseText(was, wasReason)
		taint.SetPaused(cm, paused, reason)
		now, nowReason := taint.Paused(cm)
		c.After = pauseText(now, nowReason)
		if c.Before == c.After {
			return nil // nothing to write; no ConfigMap is "not paused" too
		}
		if create {
			written, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		} else {
			written, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil || written == nil {
		return c, err
	}
	c.Changed, c.By = true, o.identity(ctx)
	if paused {
		o.record(written, corev1.EventTypeWarning, vocab.EventPauseRequested, "%s paused fencing cluster-wide (fenced pause): %s", c.By, reasonOr(reason))
		c.Note = "Every fencer holds every taint, Node write and power action within a second; `fenced resume` ends it."
	} else {
		o.record(written, corev1.EventTypeNormal, vocab.EventResumeRequested, "%s resumed fencing cluster-wide (fenced resume): %s", c.By, reasonOr(reason))
		c.Note = "Every fencer looks at every node again at once and carries out what the pause held."
	}
	return c, nil
}

func exclusionText(label string) string {
	if label == "" {
		return "included"
	}
	return "excluded (" + label + "=" + taint.ExcludeValue + ")"
}

// Exclude is `fenced exclude NODE`: the Node gets fenced's exclusion
// label, also when medik8s' label already excludes it (that one is its
// Node Maintenance Operator's, which takes it off when it is done).
func (o *Operator) Exclude(ctx context.Context, node, reason string) (SwitchChange, error) {
	return o.setExclusion(ctx, node, true, reason)
}

// Include is `fenced include NODE`: fenced's exclusion label comes off.
// medik8s' label is not fenced's to remove: a node it excludes stays
// excluded, and Include says so.
func (o *Operator) Include(ctx context.Context, node, reason string) (SwitchChange, error) {
	return o.setExclusion(ctx, node, false, reason)
}

func (o *Operator) setExclusion(ctx context.Context, node string, exclude bool, reason string) (SwitchChange, error) {
	c := SwitchChange{Switch: switchExclusion, Object: "node/" + node}
	n, err := o.getNode(ctx, node)
	if err != nil {
		return c, err
	}
	c.Before = exclusionText(taint.ExcludedBy(n))
	ours := taint.ExcludedBy(n) == taint.ExcludeLabel
	_, labelled := n.Labels[taint.ExcludeLabel]
	c.After = c.Before
	if exclude == ours && (exclude || !labelled) {
		return o.exclusionNote(c, n), nil
	}
	// A merge patch of the one label, with the Node's resourceVersion: the
	// label is all that changes, and a Node that changed meanwhile is a
	// Conflict rather than a write on what the operator was not shown.
	var value any // nil removes the label
	if exclude {
		value = taint.ExcludeValue
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": n.ResourceVersion,
		"labels":          map[string]any{taint.ExcludeLabel: value},
	}})
	if err != nil {
		return c, err
	}
	if n, err = o.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return c, fmt.Errorf("node %s: %w", node, err)
	}
	c.After = exclusionText(taint.ExcludedBy(n))
	c.Changed, c.By = true, o.identity(ctx)
	if exclude {
		o.warn(n, vocab.EventNodeExcludedFromFencing, "%s excluded node %s from fencing (fenced exclude): %s", c.By, node, reasonOr(reason))
	} else {
		o.record(n, corev1.EventTypeNormal, vocab.EventNodeIncludedInFencing, "%s included node %s in fencing again (fenced include): %s", c.By, node, reasonOr(reason))
	}
	return o.exclusionNote(c, n), nil
}

// exclusionNote says what the operator might not expect: a node that
// another label keeps excluded.
func (o *Operator) exclusionNote(c SwitchChange, n *corev1.Node) SwitchChange {
	if l := taint.ExcludedBy(n); l != "" && l != taint.ExcludeLabel {
		c.Note = fmt.Sprintf("Node %s stays excluded by %s=%s, which is not fenced's: whoever set it (medik8s' Node Maintenance Operator) removes it.",
			n.Name, l, n.Labels[l])
	}
	return c
}
