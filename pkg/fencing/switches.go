package fencing

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// The operator's switches, as the fencer sees them. What each one holds
// back is the core's rule (core.HeldBy, pkg/fencing/core/hold.go); here the fencer
// reads them — policy.dryRun from its configuration, a Node's exclusion
// label from the Node, the cluster-wide pause from one ConfigMap it watches
// — and reports what they hold back: an Event, a log line and a metric.

// pauseState is the pause as last reported.
type pauseState struct {
	paused bool
	reason string
}

// newPauseFactory returns an informer factory for the pause ConfigMap
// alone: in the lease namespace, by name (RBAC grants that one object;
// a list or watch by metadata.name is authorized by resourceNames).
func newPauseFactory(client kubernetes.Interface, namespace string) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace), trimmed,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", taint.PauseConfigMap).String()
		}))
}

// watchPause registers the pause handler: a change of the ConfigMap is
// reported and every node is looked at again at once, so that a pause holds
// pending effects and a resume carries them out without a restart.
func (f *Fencer) watchPause(inf coreinformers.ConfigMapInformer) error {
	if inf == nil {
		return nil
	}
	f.pause = inf.Lister().ConfigMaps(f.cfg.LeaseNamespace)
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { f.pauseChanged(o) },
		UpdateFunc: func(_, o any) { f.pauseChanged(o) },
		DeleteFunc: func(o any) { f.pauseChanged(o) },
	})
	if err != nil {
		return err
	}
	f.synced = append(f.synced, inf.Informer().HasSynced)
	return nil
}

// paused reads the pause from the informer's store (which is up to date
// before its handlers run, so a decision never lags a report).
func (f *Fencer) paused() (bool, string) {
	if f.pause == nil {
		return false, ""
	}
	cm, err := f.pause.Get(taint.PauseConfigMap)
	if apierrors.IsNotFound(err) || err != nil {
		return false, ""
	}
	return taint.Paused(cm)
}

// pauseChanged reports a change of the pause (log, Event on the ConfigMap,
// fenced_paused) and queues every node the fencer knows.
func (f *Fencer) pauseChanged(obj any) {
	paused, reason := f.paused()
	now := pauseState{paused, reason}
	f.mu.Lock()
	changed := now != f.pausedSeen
	f.pausedSeen = now
	names := make([]string, 0, len(f.state))
	for n, s := range f.state {
		if s.target != nil {
			names = append(names, n)
		}
	}
	f.mu.Unlock()
	if !changed {
		return
	}
	where := f.cfg.LeaseNamespace + "/" + taint.PauseConfigMap
	cm, _ := unwrap(obj).(*corev1.ConfigMap)
	if paused {
		f.cfg.Metrics.Paused.Set(1)
		f.log.Warn("fencing paused cluster-wide: no taint, no Node write and no power action until resumed; still observing and deciding",
			"configMap", where, "reason", reason)
		if cm != nil {
			f.cfg.Recorder.Event(cm, corev1.EventTypeWarning, string(vocab.EventFencingPaused), fmt.Sprintf(
				"fencer %s paused: no taint, no Node write and no power action until %s says %s: \"false\" or is deleted (reason: %s)",
				f.cfg.Identity, where, taint.PauseKey, orNone(reason)))
		}
	} else {
		f.cfg.Metrics.Paused.Set(0)
		f.log.Info("fencing resumed cluster-wide: carrying out what was held", "configMap", where)
		if cm != nil {
			f.cfg.Recorder.Event(cm, corev1.EventTypeNormal, string(vocab.EventFencingResumed), fmt.Sprintf(
				"fencer %s resumed: carrying out what the pause held", f.cfg.Identity))
		}
	}
	for _, n := range names {
		f.queue.Add(n)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none given"
	}
	return s
}

// heldNow is the executor's last check of the switches, with the pause as
// it is now: a pause may land between a decision and its execution. The
// core reports a held action itself (ActHeld); this only drops an effect
// the core sent just before the switch flipped, and the core's next step
// sees the switch and reports it.
func (f *Fencer) heldNow(name string, node *corev1.Node, a core.Action) bool {
	var o core.Observation
	if node != nil {
		o.Node.Excluded = taint.ExcludedBy(node)
	}
	o.Cluster.Paused, o.Cluster.PauseReason = f.paused()
	h := core.HeldBy(a.Kind, o, f.settings().Policy)
	if h == core.HoldNone {
		return false
	}
	f.log.Info("action held at the last moment", "node", name, "action", string(a.Kind), "hold", string(h))
	f.queue.Add(name)
	return true
}

// reportHeld reports what a switch held back: one Event on the Node, one
// log line and, in dry-run, fenced_dry_run_actions_total. The core sends
// each once per suspicion.
func (f *Fencer) reportHeld(name string, node *corev1.Node, a core.Action) {
	if a.Hold == core.HoldDryRun {
		f.cfg.Metrics.DryRunActions.WithLabelValues(core.Would(a.Held)).Inc()
	}
	f.log.Info("held", "node", name, "hold", string(a.Hold), "action", string(a.Held), "reason", a.Reason,
		"evidence", heldEvidence(a), "message", a.Message)
	if node != nil {
		f.cfg.Recorder.Event(node, a.EventType, string(a.Reason), a.Message)
	}
}

func heldEvidence(a core.Action) string {
	if a.Evidence == nil {
		return ""
	}
	return string(a.Evidence.Method)
}

// HoldsEffects says whether the operator's switches hold back effects on
// node n now — policy.dryRun, the cluster-wide pause, n's exclusion label —
// and which. Other writers in the fencer process (the stale
// VolumeAttachment report, pkg/stale) ask it before they change anything.
func (f *Fencer) HoldsEffects(n *corev1.Node) (bool, string) {
	if f.settings().Policy.DryRun {
		return true, "policy.dryRun is set"
	}
	if paused, reason := f.paused(); paused {
		if reason == "" {
			reason = "no reason given"
		}
		return true, fmt.Sprintf("fencing is paused (ConfigMap %s/%s: %s)", f.cfg.LeaseNamespace, taint.PauseConfigMap, reason)
	}
	if n != nil {
		if l := taint.ExcludedBy(n); l != "" {
			return true, fmt.Sprintf("node %s is excluded (label %s)", n.Name, l)
		}
	}
	return false, ""
}
