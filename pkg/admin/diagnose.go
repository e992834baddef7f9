package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/pkg/diagnose"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/stale"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// ErrStuck is returned by Diagnose when a pod cannot attach its volume
// (exit code 1), after the report was written.
var ErrStuck = errors.New("a pod cannot attach its volume")

// ConfirmReasonPrefix starts the reason of a `fenced confirm` run by
// `fenced diagnose --fix`, in the evidence and the Events.
const ConfirmReasonPrefix = "fenced diagnose --fix: "

// DiagnoseOptions are the inputs of Diagnose.
type DiagnoseOptions struct {
	// Scope narrows the findings (namespace, pod, claim, node) and asks
	// for the risks (--all).
	Scope diagnose.Options
	// Output prints the report; nil: as text.
	Output *printer.Flags
	// Color colours the text output (only on a terminal).
	Color bool
	// Fix cures what is safe to cure, after asking (or Yes).
	Fix bool
	// Consent is the go-ahead for the cures (asked once the plan is
	// printed).
	Consent
	// AgentURL is an agent's metrics endpoint: the fencing levels that
	// answer per node. Empty: the fencer's Events only.
	AgentURL string
}

// ParseTarget splits the argument of `fenced diagnose`: POD, pvc/NAME or
// node/NAME.
func ParseTarget(arg string) (pod, claim, node string, err error) {
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		return arg, "", "", nil
	}
	if name == "" || strings.Contains(name, "/") {
		return "", "", "", fmt.Errorf("%q: want POD, pvc/NAME or node/NAME", arg)
	}
	switch strings.ToLower(kind) {
	case "pod", "pods", "po":
		return name, "", "", nil
	case "pvc", "pvcs", "persistentvolumeclaim", "persistentvolumeclaims":
		return "", name, "", nil
	case "node", "nodes", "no":
		return "", "", name, nil
	}
	return "", "", "", fmt.Errorf("%q: want POD, pvc/NAME or node/NAME", arg)
}

// Snapshot lists what diagnose.Diagnose reads. Pods and claims are listed
// in every namespace whatever the scope: a pod of any namespace on the
// holding node may use the volume, and the cure must know it.
func (o *Operator) Snapshot(ctx context.Context, scope diagnose.Options, agentURL string) (diagnose.Snapshot, error) {
	s := diagnose.Snapshot{Now: o.now(), Fencing: map[string]diagnose.NodeFencing{}}
	c := o.Client
	ns := scope.Namespace
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing nodes: %w", err)
	}
	vas, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing volumeattachments: %w", err)
	}
	pvs, err := c.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing persistentvolumes: %w", err)
	}
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing pods: %w", err)
	}
	pvcs, err := c.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing persistentvolumeclaims: %w", err)
	}
	evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", string(vocab.EventFailedAttachVolume)).String()})
	if err != nil {
		return s, fmt.Errorf("listing events: %w", err)
	}
	// pkg/taint's recorder writes the Events about Nodes to "default".
	nodeEvs, err := c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.kind", "Node").String()})
	if err != nil {
		return s, fmt.Errorf("listing the Events of Nodes: %w", err)
	}
	deps, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing deployments: %w", err)
	}
	rss, err := c.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing replicasets: %w", err)
	}
	s.Nodes = pointers(nodes.Items)
	s.VolumeAttachments = pointers(vas.Items)
	s.PVs = pointers(pvs.Items)
	s.Pods = pointers(pods.Items)
	s.PVCs = pointers(pvcs.Items)
	s.Events = pointers(evs.Items)
	s.Deployments = pointers(deps.Items)
	s.ReplicaSets = pointers(rss.Items)
	var agent *AgentView
	if agentURL != "" {
		if agent, err = ReadAgent(ctx, agentURL); err != nil {
			// The log, not Out: -o json must stay JSON.
			o.log().Warn("could not read the agent: fencing levels from the fencer's Events only", "agent", agentURL, "err", err)
			agent = nil
		}
	}
	graceful := o.gracefulShutdowns(ctx)
	for _, n := range s.Nodes {
		nf := o.nodeFencing(n, nodeEvs.Items, agent)
		if g, ok := graceful[n.Name]; ok {
			nf.GracefulShutdown = g
		}
		s.Fencing[n.Name] = nf
	}
	return s, nil
}

// gracefulShutdowns reads, from the agents' own Leases in LeaseNamespace,
// whether each node's kubelet has graceful node shutdown: true when its
// agent found the kubelet's logind shutdown delay lock, false when logind
// listed none, absent when the agent could not ask logind ("unknown"),
// published nothing yet, or its Lease cannot be read. Only the node's own
// identity may write that Lease (the agent identity admission policy), so
// it is the node's own word; it feeds a risk, never a cure. Leases that
// cannot be listed (RBAC: list leases in fenced's namespace) are logged,
// not fatal: the risk is then not derived, as before.
func (o *Operator) gracefulShutdowns(ctx context.Context) map[string]*bool {
	out := map[string]*bool{}
	if o.LeaseNamespace == "" {
		return out
	}
	leases, err := o.Client.CoordinationV1().Leases(o.LeaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		o.log().Warn("could not read the agents' Leases: nodes without graceful shutdown are not listed", "namespace", o.LeaseNamespace, "err", err)
		return out
	}
	for i := range leases.Items {
		node, g, ok := publish.GracefulShutdownOf(&leases.Items[i])
		if !ok {
			continue
		}
		switch g {
		case vocab.GracefulKubeletDelayLock:
			out[node] = ptr.To(true)
		case vocab.GracefulNone:
			out[node] = ptr.To(false)
		}
	}
	return out
}

// nodeFencing parses fenced's state of node n: its taint and evidence, its
// latest fenced Event, whether it has fencing configured (the inventory)
// and whether its devices answer (the fencer's monitor Events, or the
// agent's metric).
func (o *Operator) nodeFencing(n *corev1.Node, events []corev1.Event, agent *AgentView) diagnose.NodeFencing {
	nf := diagnose.NodeFencing{Tainted: taint.HasTaint(n), ByFenced: taint.AppliedByFenced(n)}
	if nf.ByFenced {
		if ev, ok, err := taint.EvidenceOf(n); err != nil {
			nf.EvidenceError = err.Error()
		} else if ok {
			nf.Evidence = &ev
		}
	}
	var last, monitor *corev1.Event
	for i := range events {
		e := &events[i]
		if e.InvolvedObject.Name != n.Name || !fencedEvent(e) {
			continue
		}
		if last == nil || diagnose.EventTime(e).After(diagnose.EventTime(last)) {
			last = e
		}
		if r := vocab.EventReason(e.Reason); (r == vocab.EventCannotBeFencedAutomatically || r == vocab.EventFenceDevicesAnswer) &&
			(monitor == nil || diagnose.EventTime(e).After(diagnose.EventTime(monitor))) {
			monitor = e
		}
	}
	if last != nil {
		nf.LastEvent = &diagnose.NodeEvent{Type: last.Type, Reason: last.Reason, Message: last.Message, Time: diagnose.EventTime(last)}
	}
	if monitor != nil {
		ok := vocab.EventReason(monitor.Reason) == vocab.EventFenceDevicesAnswer
		nf.Fenceable, nf.FenceableSays = &ok, fmt.Sprintf("%s %s: %s", monitor.Reason, age(diagnose.EventTime(monitor), o.now()), monitor.Message)
	}
	if agent != nil {
		if r, ok := agent.LevelsReady[n.Name]; ok {
			ready := r > 0
			nf.Fenceable, nf.FenceableSays = &ready, fmt.Sprintf("%d fencing level(s) answer, says the agent %s", r, agent.URL)
		}
	}
	if o.Inventory != nil {
		_, hasBMC := o.Inventory.BMC(n.Name)
		configured := hasBMC
		if src, ok := o.Inventory.(levelSource); ok && len(src.Levels(n.Name)) > 0 {
			configured = true
		}
		nf.Configured = &configured
	}
	return nf
}

// fencedEvent reports whether fenced recorded e (the agent as "fenced",
// the commands as "fenced-confirm", ...).
func fencedEvent(e *corev1.Event) bool {
	return strings.HasPrefix(e.Source.Component, "fenced") || strings.HasPrefix(e.ReportingController, "fenced")
}

// Diagnose is `fenced diagnose`: it gathers a Snapshot, explains every pod
// that cannot attach its volume and writes the report; with Fix it then
// cures what is safe. It returns ErrStuck when something is stuck and was
// not cured, an error wrapping ErrRefused when a cure was refused.
func (o *Operator) Diagnose(ctx context.Context, opts DiagnoseOptions) (diagnose.Report, error) {
	s, err := o.Snapshot(ctx, opts.Scope, opts.AgentURL)
	if err != nil {
		return diagnose.Report{}, err
	}
	r := diagnose.Diagnose(s, opts.Scope)
	out := opts.Output
	if out == nil {
		out = printer.NewFlags()
	}
	if err := out.Print(o.Out, DiagnosisDoc(r, opts.Color, s.Now)); err != nil {
		return r, err
	}
	if opts.Fix {
		return r, o.fix(ctx, s, r, opts)
	}
	if r.Stuck() {
		return r, ErrStuck
	}
	return r, nil
}

// cure is one thing --fix does.
type cure struct {
	action diagnose.FixAction
	cause  diagnose.Cause
	// va as the report saw it for FixDeleteAttachment and
	// FixReleaseAttachment; node for FixConfirmNode.
	va      stale.Target
	node    string
	summary string
	// findings are the findings it cures.
	findings int
}

// plan picks the cures of r: automatic fixes with no refusal, one per
// VolumeAttachment or node. The rest is printed with why not.
func (o *Operator) plan(s diagnose.Snapshot, r diagnose.Report) (cures []*cure, uncured int) {
	w := o.Out
	checked := map[string]*storagev1.VolumeAttachment{}
	for _, va := range s.VolumeAttachments {
		checked[va.Name] = va
	}
	byKey := map[string]*cure{}
	fmt.Fprintln(w, "\nfenced diagnose --fix:")
	for _, f := range r.Findings {
		switch {
		case f.Fix.Automatic && len(f.Fix.Refusals) > 0:
			fmt.Fprintf(w, "  %s: will NOT %s: %s\n", f.Pod, f.Fix.Action, diagnose.Refusals(f.Fix.Refusals))
			uncured++
			continue
		case f.Fix.Action == diagnose.FixPatchWorkload:
			fmt.Fprintf(w, "  %s: fenced never changes a workload; to cure it, apply:\n      %s\n", f.Pod, f.Fix.Command)
			uncured++
			continue
		case !f.Fix.Automatic:
			fmt.Fprintf(w, "  %s: nothing to cure automatically (%s: %s)\n", f.Pod, f.Cause, f.Fix.Action)
			uncured++
			continue
		}
		key := string(f.Fix.Action) + "/" + f.Attachment
		c := &cure{action: f.Fix.Action, cause: f.Cause, summary: f.Summary}
		switch f.Fix.Action {
		case diagnose.FixDeleteAttachment, diagnose.FixReleaseAttachment:
			c.va = stale.Target{Name: f.Attachment, Action: stale.ActionDelete}
			if f.Fix.Action == diagnose.FixReleaseAttachment {
				c.va.Action = stale.ActionRelease
			}
			if va := checked[f.Attachment]; va != nil {
				c.va.UID, c.va.ResourceVersion = va.UID, va.ResourceVersion
			}
		case diagnose.FixConfirmNode:
			key, c.node = string(f.Fix.Action)+"/"+f.HeldBy, f.HeldBy
		default:
			uncured++
			continue
		}
		if prev := byKey[key]; prev != nil {
			prev.findings++
			continue
		}
		c.findings = 1
		byKey[key] = c
		cures = append(cures, c)
		switch c.action {
		case diagnose.FixDeleteAttachment:
			fmt.Fprintf(w, "  %s: delete volumeattachment %s (node %s), after checking again that nothing uses it\n", f.Pod, c.va.Name, orDeleted(f.HeldBy))
		case diagnose.FixReleaseAttachment:
			fmt.Fprintf(w, "  %s: remove the finalizers of volumeattachment %s (node %s), which the CSI driver does not detach, after checking again that nothing uses it\n", f.Pod, c.va.Name, f.HeldBy)
		case diagnose.FixConfirmNode:
			fmt.Fprintf(w, "  %s: fenced confirm %s: fence the dead node with manual evidence (refused if its BMC or a fencing level reads it on).\n"+
				"      WARNING: if node %s is not really powered off, two machines will write to the same disks.\n", f.Pod, c.node, c.node)
		}
	}
	return cures, uncured
}

func orDeleted(node string) string {
	if node == "" {
		return "(deleted)"
	}
	return node
}

// fix carries out --fix on report r of snapshot s.
func (o *Operator) fix(ctx context.Context, s diagnose.Snapshot, r diagnose.Report, opts DiagnoseOptions) error {
	w := o.Out
	if !r.Stuck() {
		fmt.Fprintln(w, "Nothing to fix.")
		return nil
	}
	cures, uncured := o.plan(s, r)
	if len(cures) == 0 {
		fmt.Fprintln(w, "Nothing fenced can cure safely: nothing changed.")
		return ErrStuck
	}
	user := o.identity(ctx)
	fmt.Fprintf(w, "  you: %s (recorded in the Events)\n", user)
	if err := opts.Ask(ctx, w, fmt.Sprintf("Apply these %d cure(s)?", len(cures))); err != nil {
		fmt.Fprintln(w, "Nothing changed.")
		return err
	}
	var errs []error
	for _, c := range cures {
		var err error
		switch c.action {
		case diagnose.FixDeleteAttachment, diagnose.FixReleaseAttachment:
			err = o.cureAttachment(ctx, c, user)
		case diagnose.FixConfirmNode:
			fmt.Fprintf(w, "\n--- fenced confirm %s\n", c.node)
			err = o.Confirm(ctx, ConfirmOptions{Node: c.node, Consent: Consent{Yes: true}, AgentURL: opts.AgentURL,
				Reason: ConfirmReasonPrefix + string(c.cause) + ": " + c.summary})
			o.log().Info("diagnose --fix: confirm", "node", c.node, "cause", c.cause, "by", user, "err", err)
		}
		if err != nil {
			fmt.Fprintf(w, "NOT cured: %v\n", err)
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if uncured > 0 {
		return ErrStuck
	}
	return nil
}

// cureAttachment deletes c's VolumeAttachment, or removes the finalizers
// of one stuck in deletion, if StaleAttachment, run again on objects read
// now, allows it (stale.Cure): an object that changed since the report
// read it, or between the re-check and the write, is kept (and not
// retried: the next run decides anew).
func (o *Operator) cureAttachment(ctx context.Context, c *cure, user string) error {
	w := o.Out
	cure := stale.Cure{Client: o.Client, AllowDeletedNode: true}
	out := cure.Apply(ctx, c.va)
	va := out.VA
	switch out.Result {
	case stale.ResultDeleted:
		why := fmt.Sprintf("%s deleted VolumeAttachment %s of volume %s on node %s (fenced diagnose --fix, %s): %s",
			user, va.Name, diagnose.VolumeOf(va), va.Spec.NodeName, c.cause, c.summary)
		o.vaEvent(va, corev1.EventTypeNormal, vocab.EventStaleVolumeAttachmentDeleted, why)
		o.log().Info("diagnose --fix: deleted a VolumeAttachment", "volumeattachment", va.Name, "uid", va.UID, "resourceVersion", va.ResourceVersion,
			"node", va.Spec.NodeName, "volume", diagnose.VolumeOf(va), "cause", c.cause, "by", user)
		fmt.Fprintf(w, "Deleted volumeattachment %s (node %s, volume %s).\n", va.Name, va.Spec.NodeName, diagnose.VolumeOf(va))
	case stale.ResultReleased:
		why := fmt.Sprintf("%s removed the finalizers %v of VolumeAttachment %s of volume %s on node %s, which its CSI driver did not detach (fenced diagnose --fix, %s): %s",
			user, out.Finalizers, va.Name, diagnose.VolumeOf(va), va.Spec.NodeName, c.cause, c.summary)
		o.vaEvent(va, corev1.EventTypeNormal, vocab.EventStaleVolumeAttachmentReleased, why)
		o.log().Info("diagnose --fix: released a VolumeAttachment stuck in deletion", "volumeattachment", va.Name, "uid", va.UID,
			"resourceVersion", va.ResourceVersion, "finalizers", out.Finalizers, "node", va.Spec.NodeName, "volume", diagnose.VolumeOf(va), "cause", c.cause, "by", user)
		fmt.Fprintf(w, "Removed the finalizers of volumeattachment %s (node %s, volume %s): it goes now.\n", va.Name, va.Spec.NodeName, diagnose.VolumeOf(va))
	case stale.ResultGone:
		fmt.Fprintf(w, "volumeattachment %s is already gone.\n", c.va.Name)
	case stale.ResultNoFinalizers:
		fmt.Fprintf(w, "volumeattachment %s has no finalizers left: it goes on its own.\n", c.va.Name)
	case stale.ResultUnreadable, stale.ResultUnchecked, stale.ResultWriteFailed:
		return out.Err
	default:
		return o.refuseVA(va, user, out.Why)
	}
	return nil
}

// refuseVA records and returns the refusal to delete va.
func (o *Operator) refuseVA(va *storagev1.VolumeAttachment, user, why string) error {
	o.log().Info("diagnose --fix: refused to delete a VolumeAttachment", "volumeattachment", va.Name, "node", va.Spec.NodeName,
		"volume", diagnose.VolumeOf(va), "by", user, "why", why)
	return refused("volumeattachment %s not deleted or released: %s", va.Name, why)
}

// vaEvent records an Event on a VolumeAttachment (cluster-scoped: the
// recorder files it in "default").
func (o *Operator) vaEvent(va *storagev1.VolumeAttachment, typ string, reason vocab.EventReason, msg string) {
	if o.Recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "VolumeAttachment", APIVersion: "storage.k8s.io/v1", Name: va.Name, UID: va.UID}
	o.Recorder.Event(ref, typ, string(reason), msg)
}

// pointers returns a pointer to each item of a List's Items, in order.
func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
