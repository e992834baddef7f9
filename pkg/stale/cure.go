package stale

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/diagnose"
)

// Action is what a cure writes.
type Action string

// Actions.
const (
	// ActionDelete deletes the VolumeAttachment, with preconditions on the
	// UID and resourceVersion re-checked.
	ActionDelete Action = "delete"
	// ActionRelease removes the finalizers of a VolumeAttachment stuck in
	// deletion (its CSI driver does not detach it; deleting it again does
	// nothing), by an update carrying the resourceVersion re-checked.
	ActionRelease Action = "release"
)

// ActionFor is the cure for va as it was checked: release when it is
// being deleted, delete otherwise.
func ActionFor(va *storagev1.VolumeAttachment) Action {
	if va.DeletionTimestamp != nil {
		return ActionRelease
	}
	return ActionDelete
}

// Result is how a cure ended.
type Result string

// Results. Only ResultDeleted and ResultReleased wrote anything.
const (
	ResultDeleted  Result = "deleted"
	ResultReleased Result = "released"
	// ResultGone: the VolumeAttachment no longer exists (before the
	// re-check or at the write): nothing to do.
	ResultGone Result = "gone"
	// ResultNoFinalizers: being deleted and nothing keeps it any more: it
	// goes on its own.
	ResultNoFinalizers Result = "no-finalizers"
	// ResultReplaced: a new object of the same name (another UID).
	ResultReplaced Result = "replaced"
	// ResultChanged: it changed since it was checked: another
	// resourceVersion (for a delete), or its deletion started or ended.
	ResultChanged Result = "changed"
	// ResultUnreadable: the VolumeAttachment could not be read again (Err).
	ResultUnreadable Result = "unreadable"
	// ResultUnchecked: the rule's inputs could not be read (Err): a
	// failing or forbidden read is no evidence.
	ResultUnchecked Result = "unchecked"
	// ResultRefused: diagnose.StaleAttachment refuses on the objects read
	// now (Refusals).
	ResultRefused Result = "refused"
	// ResultNodeGone: the Node no longer exists and the Cure does not
	// allow deleted Nodes (AllowDeletedNode).
	ResultNodeGone Result = "node-gone"
	// ResultHeld: the operator's switches hold effects on the node (Held).
	ResultHeld Result = "held"
	// ResultConflict: the API server refused the write because the object
	// changed after the re-check (Err).
	ResultConflict Result = "conflict"
	// ResultWriteFailed: the delete or update failed otherwise (Err).
	ResultWriteFailed Result = "write-failed"
)

// Target is the VolumeAttachment a cure is for, as its caller checked it.
type Target struct {
	Name string
	// UID is the object checked; empty: not compared.
	UID types.UID
	// ResourceVersion is the version checked; empty: not compared. A
	// release ignores it: the external-attacher rewrites
	// status.detachError on every failed retry of a stuck detach.
	ResourceVersion string
	Action          Action
}

// Outcome is what a cure did, and why not when it wrote nothing.
type Outcome struct {
	Result Result
	// VA is the object re-checked (the one written, with the UID and
	// resourceVersion of the write); nil when it could not be read.
	VA *storagev1.VolumeAttachment
	// Attachment is the rule's inputs as read from the API server for the
	// re-check.
	Attachment diagnose.Attachment
	// Refusals are the rule's, for ResultRefused.
	Refusals []diagnose.Refusal
	// Finalizers are those a release removed.
	Finalizers []string
	// Why says, for anything but a write, why nothing was written.
	Why string
	// Err is the API error of ResultUnreadable, ResultUnchecked,
	// ResultConflict and ResultWriteFailed: worth a retry, or a report.
	Err error
}

// Wrote reports whether the cure deleted or released the attachment.
func (o Outcome) Wrote() bool { return o.Result == ResultDeleted || o.Result == ResultReleased }

// Cure is the one way fenced writes a stale VolumeAttachment, for
// `fenced diagnose --fix` and for the fencers' Reporter: read it again,
// read the rule's inputs again from the API server, run
// diagnose.StaleAttachment on them, then delete it (preconditions on the
// UID and resourceVersion just checked) or remove its finalizers (an
// update carrying that resourceVersion). Anything that changed, cannot be
// read, or is refused keeps it.
type Cure struct {
	// Client reads and writes with the caller's credentials.
	Client kubernetes.Interface
	// AllowDeletedNode lets a deleted Node's attachment be written: a
	// person decided (`fenced diagnose --fix` asks). The fencers never: a
	// deleted Node says nothing about the machine, whose kubelet may still
	// have the volume mounted.
	AllowDeletedNode bool
	// Held, when set, says whether the operator's switches (dry-run, the
	// pause, the node's exclusion label: the fencer's HoldsEffects) hold
	// effects on node n (nil: the Node does not exist).
	Held func(n *corev1.Node) (held bool, why string)

	// Test hooks, with the attachment's name: beforeRecheck before it is
	// read again, beforeWrite between the re-check and the write.
	beforeRecheck func(ctx context.Context, va string)
	beforeWrite   func(ctx context.Context, va string)
}

// Apply re-checks t against the live objects and, when nothing changed
// and the rule allows it, applies t.Action.
func (c *Cure) Apply(ctx context.Context, t Target) Outcome {
	if c.beforeRecheck != nil {
		c.beforeRecheck(ctx, t.Name)
	}
	vas := c.Client.StorageV1().VolumeAttachments()
	va, err := vas.Get(ctx, t.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Outcome{Result: ResultGone, Why: "it is gone"}
	case err != nil:
		err = fmt.Errorf("volumeattachment/%s: %w", t.Name, err)
		return Outcome{Result: ResultUnreadable, Err: err, Why: "cannot read it again: " + err.Error()}
	}
	o := Outcome{VA: va}
	if r, why := changed(t, va); r != "" {
		o.Result, o.Why = r, why
		return o
	}
	if o.Attachment, err = gather(ctx, apiSource{c.Client}, va); err != nil {
		o.Result, o.Err, o.Why = ResultUnchecked, err, "cannot check it again: "+err.Error()
		return o
	}
	if o.Refusals = diagnose.StaleAttachment(o.Attachment); len(o.Refusals) > 0 {
		o.Result, o.Why = ResultRefused, diagnose.Refusals(o.Refusals)
		return o
	}
	if o.Attachment.Node == nil && !c.AllowDeletedNode {
		o.Result, o.Why = ResultNodeGone, fmt.Sprintf("node/%s no longer exists, which says nothing about the machine", va.Spec.NodeName)
		return o
	}
	if c.Held != nil {
		if held, why := c.Held(o.Attachment.Node); held {
			o.Result, o.Why = ResultHeld, "held: "+why
			return o
		}
	}
	if c.beforeWrite != nil {
		c.beforeWrite(ctx, t.Name)
	}
	if t.Action == ActionRelease {
		update := va.DeepCopy()
		update.Finalizers = nil
		_, err = vas.Update(ctx, update, metav1.UpdateOptions{})
		o.Finalizers = va.Finalizers
	} else {
		err = vas.Delete(ctx, va.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &va.UID, ResourceVersion: &va.ResourceVersion}})
	}
	return written(o, t.Action, err)
}

// changed compares the object read again with the one checked: the same
// UID, and what the action needs (a delete: the same resourceVersion and
// not being deleted; a release: being deleted, with finalizers).
func changed(t Target, va *storagev1.VolumeAttachment) (Result, string) {
	deleting := va.DeletionTimestamp != nil
	switch {
	case t.UID != "" && va.UID != t.UID:
		return ResultReplaced, "it was replaced by a new object since it was checked"
	case t.Action == ActionRelease && !deleting:
		return ResultChanged, "it is not being deleted any more, so its finalizers are not what holds it"
	case t.Action == ActionRelease && len(va.Finalizers) == 0:
		return ResultNoFinalizers, "nothing keeps it any more: it goes on its own"
	case t.Action == ActionRelease:
		return "", ""
	case deleting:
		return ResultChanged, "it is being deleted since it was checked"
	case t.ResourceVersion != "" && va.ResourceVersion != t.ResourceVersion:
		return ResultChanged, fmt.Sprintf("it changed since it was checked (resourceVersion %s, now %s)", t.ResourceVersion, va.ResourceVersion)
	}
	return "", ""
}

// written is the outcome of the write: err is the delete's or the
// update's.
func written(o Outcome, a Action, err error) Outcome {
	what := "the delete's precondition failed"
	if a == ActionRelease {
		what = "the finalizers' removal conflicted on resourceVersion " + o.VA.ResourceVersion
	}
	switch {
	case err == nil && a == ActionRelease:
		o.Result = ResultReleased
	case err == nil:
		o.Result = ResultDeleted
	case apierrors.IsNotFound(err):
		o.Result, o.Why = ResultGone, "it is gone"
	case apierrors.IsConflict(err):
		o.Result, o.Err = ResultConflict, err
		o.Why = fmt.Sprintf("it changed since it was checked: %s (%v)", what, err)
	default:
		o.Result, o.Err = ResultWriteFailed, fmt.Errorf("%s volumeattachment/%s: %w", a, o.VA.Name, err)
		o.Why = o.Err.Error()
	}
	return o
}

// source is where gather reads the rule's inputs: the API server
// (apiSource, for the re-check right before a write) or the Reporter's
// informers (listerSource). A NotFound error means the object does not
// exist.
type source interface {
	node(ctx context.Context, name string) (*corev1.Node, error)
	volume(ctx context.Context, name string) (*corev1.PersistentVolume, error)
	podsOn(ctx context.Context, node string) ([]*corev1.Pod, error)
	claim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error)
}

// gather reads what diagnose.StaleAttachment needs about va: its Node
// (nil when it does not exist: then nothing else matters), its
// PersistentVolume (nil when unknown), the pods bound to the node and the
// claims of those not finished (a claim that does not exist is left out:
// the rule refuses on it). Any other failure is an error: no check.
func gather(ctx context.Context, src source, va *storagev1.VolumeAttachment) (diagnose.Attachment, error) {
	a := diagnose.Attachment{VA: va, Claims: map[string]*corev1.PersistentVolumeClaim{}}
	n, err := src.node(ctx, va.Spec.NodeName)
	switch {
	case apierrors.IsNotFound(err):
		return a, nil
	case err != nil:
		return a, fmt.Errorf("node/%s: %w", va.Spec.NodeName, err)
	}
	a.Node = n
	if pv := diagnose.VolumeOf(va); pv != "" {
		v, err := src.volume(ctx, pv)
		switch {
		case err == nil:
			a.Volume = v
		case !apierrors.IsNotFound(err):
			return a, fmt.Errorf("persistentvolume/%s: %w", pv, err)
		}
	}
	if a.Pods, err = src.podsOn(ctx, n.Name); err != nil {
		return a, fmt.Errorf("pods on node/%s: %w", n.Name, err)
	}
	for _, p := range a.Pods {
		if diagnose.Finished(p) {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			key := p.Namespace + "/" + v.PersistentVolumeClaim.ClaimName
			if _, done := a.Claims[key]; done {
				continue
			}
			cl, err := src.claim(ctx, p.Namespace, v.PersistentVolumeClaim.ClaimName)
			switch {
			case err == nil:
				a.Claims[key] = cl
			case !apierrors.IsNotFound(err):
				return a, fmt.Errorf("persistentvolumeclaim/%s: %w", key, err)
			}
		}
	}
	return a, nil
}

// apiSource reads from the API server.
type apiSource struct{ c kubernetes.Interface }

func (s apiSource) node(ctx context.Context, name string) (*corev1.Node, error) {
	return s.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (s apiSource) volume(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	return s.c.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
}

func (s apiSource) podsOn(ctx context.Context, node string) ([]*corev1.Pod, error) {
	l, err := s.c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, len(l.Items))
	for i := range l.Items {
		pods[i] = &l.Items[i]
	}
	return pods, nil
}

func (s apiSource) claim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	return s.c.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}
