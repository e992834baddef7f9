package stale

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"fenced.io/fenced/pkg/diagnose"
	"fenced.io/fenced/pkg/metrics"
	"fenced.io/fenced/pkg/vocab"
)

// Decision is the `decision` of the Reporter's log lines, one per
// decision about a VolumeAttachment.
type Decision string

// Decisions.
const (
	// DecisionHolding: the rule finds nothing against the attachment; the
	// grace period starts (again).
	DecisionHolding Decision = "holding"
	// DecisionReported: stale for the whole grace period: counted and
	// reported.
	DecisionReported Decision = "reported"
	// DecisionCleared: a held or reported attachment is no longer stale
	// (the reason says why), or it is gone.
	DecisionCleared Decision = "cleared"
	// DecisionDeleted: deleted after the re-check on fresh objects.
	DecisionDeleted Decision = "deleted"
	// DecisionReleased: stuck in deletion (its detach never finished);
	// its finalizers removed after the re-check on fresh objects.
	DecisionReleased Decision = "released"
	// DecisionKept: the switch is on, but the re-check refused, could
	// not be made, or the object changed before the delete.
	DecisionKept Decision = "kept"
)

// How often Events about one object repeat while the attachment stays
// stale, and how many the Reporter sends in all: after a mass failure
// hundreds of attachments can turn stale at once, and client-go's budget
// is per object (pkg/taint/recorder.go), not per sender.
const (
	eventRepeat = 30 * time.Minute
	eventBurst  = 25
	eventRate   = rate.Limit(1.0 / 5) // one every 5 s once the burst is spent
	// eventRetry is when an attachment whose Events the budget held back
	// is looked at again.
	eventRetry = 10 * time.Second
)

// Index names. Distinct from pkg/fencing's ("byNode" on VolumeAttachments):
// the informers are shared.
const (
	byNode   = "stale.byNode"
	byVolume = "stale.byVolume"
	byClaim  = "stale.byClaim"
)

// Informers are what the Reporter watches.
type Informers struct {
	Nodes             coreinformers.NodeInformer
	VolumeAttachments storageinformers.VolumeAttachmentInformer
	Pods              coreinformers.PodInformer
	Volumes           coreinformers.PersistentVolumeInformer
	Claims            coreinformers.PersistentVolumeClaimInformer
}

// NewInformers takes the Reporter's informers from cluster, the agent's
// one factory for cluster-scoped objects (Nodes and VolumeAttachments are
// the fencer's too; Pods and claims are listed across all namespaces).
// The caller starts and shuts the factory down. New trims the Pods that
// informer caches to what the report reads (trimPod): a component that
// needs whole pods needs a factory of its own.
func NewInformers(cluster informers.SharedInformerFactory) Informers {
	return Informers{
		Nodes:             cluster.Core().V1().Nodes(),
		VolumeAttachments: cluster.Storage().V1().VolumeAttachments(),
		Pods:              cluster.Core().V1().Pods(),
		Volumes:           cluster.Core().V1().PersistentVolumes(),
		Claims:            cluster.Core().V1().PersistentVolumeClaims(),
	}
}

// Config wires a Reporter.
type Config struct {
	// Client re-reads and deletes (only with Delete).
	Client    kubernetes.Interface
	Informers Informers
	Recorder  record.EventRecorder
	// Grace is how long an attachment must look stale without a break
	// (policy.staleAttachmentGrace; 0: DefaultGrace).
	Grace time.Duration
	// Delete deletes reported attachments after a re-check, and releases
	// (removes the finalizers of) reported attachments stuck in deletion
	// (policy.deleteStaleVolumeAttachments; DefaultDelete).
	Delete bool
	// Held, when set, says whether the operator's switches hold back
	// effects on node n (n nil: the node does not exist): dry-run, the
	// cluster-wide pause, the node's exclusion label (the fencer's
	// HoldsEffects). Held: the attachment is reported, never deleted.
	Held    func(n *corev1.Node) (held bool, why string)
	Metrics *Metrics
	Logger  *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time

	// Test hooks, called with the attachment's name: checked after every
	// check on the informers' objects, beforeRecheck before the fresh
	// reads of the delete path, beforeDelete between the re-check and the
	// delete (or the finalizers' removal).
	checked       func(va string, refusals []diagnose.Refusal)
	beforeRecheck func(ctx context.Context, va string)
	beforeDelete  func(ctx context.Context, va string)
}

// Metrics are the Reporter's.
type Metrics struct {
	// Stale is fenced_stale_volume_attachments.
	Stale prometheus.Gauge
	// Deleted is fenced_stale_volume_attachments_deleted_total.
	Deleted prometheus.Counter
}

// NewMetrics registers the Reporter's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Stale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.StaleAttachmentsMetric,
			Help: "VolumeAttachments this fencer holds for stale: their Node is Ready and nothing there uses the volume, or the Node is gone, for policy.staleAttachmentGrace. Every fencer counts them: alert on max().",
		}),
		Deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.StaleAttachmentsDeletedMetric,
			Help: "Stale VolumeAttachments this fencer deleted after re-checking them, and stale ones stuck in deletion whose finalizers it removed (policy.deleteStaleVolumeAttachments; DefaultDelete).",
		}),
	}
	reg.MustRegister(m.Stale, m.Deleted)
	return m
}

// Reporter watches VolumeAttachments and reports (and optionally deletes)
// the stale ones. Inputs arrive through informers; the only timers are
// the grace period's and the Events' requeues.
type Reporter struct {
	cfg   Config
	log   *slog.Logger
	queue workqueue.TypedRateLimitingInterface[string]

	nodes   corelisters.NodeLister
	vas     storagelisters.VolumeAttachmentLister
	vaIdx   cache.Indexer
	podIdx  cache.Indexer
	volumes corelisters.PersistentVolumeLister
	claims  corelisters.PersistentVolumeClaimLister
	claimIx cache.Indexer
	synced  []cache.InformerSynced
	events  *rate.Limiter
	// curer deletes or releases (only with Delete).
	curer *Cure

	mu   sync.Mutex
	held map[string]*held
}

// held is an attachment the rule found nothing against, since when.
type held struct {
	// uid and rv are the VolumeAttachment the grace runs for: a new object
	// or any change to it starts the grace again — except while it is
	// being deleted (deleting), when only the deletion starting restarts
	// it: the external-attacher rewrites status.detachError on every
	// failed retry.
	uid      types.UID
	rv       string
	deleting bool
	since    time.Time
	reported bool
	// sent is when an Event last went to each object (pod/ns/name or
	// volumeattachment/name).
	sent map[string]time.Time
}

// New builds a Reporter and registers its indexers and handlers on
// cfg.Informers, which must not have started yet.
func New(cfg Config) (*Reporter, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if cfg.Recorder == nil {
		return nil, errors.New("stale: no event recorder")
	}
	r := &Reporter{
		cfg:    cfg,
		log:    cfg.Logger,
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		events: rate.NewLimiter(eventRate, eventBurst),
		held:   map[string]*held{},
		curer: &Cure{Client: cfg.Client, Held: cfg.Held,
			beforeRecheck: cfg.beforeRecheck, beforeWrite: cfg.beforeDelete},
	}
	if err := r.watch(cfg.Informers); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reporter) watch(inf Informers) error {
	vaInf, nodeInf, podInf, pvInf, pvcInf := inf.VolumeAttachments.Informer(), inf.Nodes.Informer(),
		inf.Pods.Informer(), inf.Volumes.Informer(), inf.Claims.Informer()
	if err := vaInf.AddIndexers(cache.Indexers{
		byNode: func(o any) ([]string, error) { return []string{o.(*storagev1.VolumeAttachment).Spec.NodeName}, nil },
		byVolume: func(o any) ([]string, error) {
			if pv := o.(*storagev1.VolumeAttachment).Spec.Source.PersistentVolumeName; pv != nil {
				return []string{*pv}, nil
			}
			return nil, nil
		},
	}); err != nil {
		return err
	}
	// Every pod of the cluster is cached: keep only what the rule and the
	// Events read of them.
	if err := podInf.SetTransform(trimPod); err != nil {
		return err
	}
	if err := podInf.AddIndexers(cache.Indexers{
		byNode: func(o any) ([]string, error) { return []string{o.(*corev1.Pod).Spec.NodeName}, nil },
		byClaim: func(o any) ([]string, error) {
			p := o.(*corev1.Pod)
			var keys []string
			for _, v := range p.Spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					keys = append(keys, p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
				}
			}
			return keys, nil
		},
	}); err != nil {
		return err
	}
	if err := pvcInf.AddIndexers(cache.Indexers{
		byVolume: func(o any) ([]string, error) { return []string{o.(*corev1.PersistentVolumeClaim).Spec.VolumeName}, nil },
	}); err != nil {
		return err
	}
	r.vaIdx, r.podIdx, r.claimIx = vaInf.GetIndexer(), podInf.GetIndexer(), pvcInf.GetIndexer()
	r.nodes, r.vas = inf.Nodes.Lister(), inf.VolumeAttachments.Lister()
	r.volumes, r.claims = inf.Volumes.Lister(), inf.Claims.Lister()

	handlers := []struct {
		inf cache.SharedIndexInformer
		// queue queues the attachments a change of o (old, new) concerns.
		queue func(o any)
		// changed filters updates (nil: every update).
		changed func(old, new any) bool
	}{
		{vaInf, func(o any) {
			if va, ok := unwrap(o).(*storagev1.VolumeAttachment); ok {
				r.queue.Add(va.Name)
			}
		}, nil},
		{nodeInf, func(o any) {
			if n, ok := unwrap(o).(*corev1.Node); ok {
				r.queueBy(byNode, n.Name)
			}
		}, nodeChanged},
		{podInf, func(o any) {
			if p, ok := unwrap(o).(*corev1.Pod); ok {
				r.queuePod(p)
			}
		}, nil},
		{pvInf, func(o any) {
			if pv, ok := unwrap(o).(*corev1.PersistentVolume); ok {
				r.queueBy(byVolume, pv.Name)
			}
		}, nil},
		{pvcInf, func(o any) {
			if c, ok := unwrap(o).(*corev1.PersistentVolumeClaim); ok {
				r.queueClaim(c)
			}
		}, nil},
	}
	for _, h := range handlers {
		queue, changed := h.queue, h.changed
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: queue,
			UpdateFunc: func(old, o any) {
				if changed == nil || changed(old, o) {
					queue(old)
					queue(o)
				}
			},
			DeleteFunc: queue,
		}); err != nil {
			return err
		}
		r.synced = append(r.synced, h.inf.HasSynced)
	}
	return nil
}

// trimPod is the Pod informer's transform: a fencer caches every pod of
// the cluster for this report, and needs of each only its identity (for
// the Events), its node, its claims and its phase. Anything else passes
// through unchanged.
func trimPod(o any) (any, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	t := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: v.Name,
				VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		}
	}
	return t, nil
}

// nodeChanged reports whether a Node update changes what the rule reads
// of it: its Ready condition and volumesInUse (kubelets update their
// Node's status often; most of it does not matter here).
func nodeChanged(old, o any) bool {
	a, ok1 := old.(*corev1.Node)
	b, ok2 := o.(*corev1.Node)
	return !ok1 || !ok2 || diagnose.NodeReady(a) != diagnose.NodeReady(b) ||
		!slices.Equal(a.Status.VolumesInUse, b.Status.VolumesInUse)
}

// queueBy queues the attachments in the VolumeAttachment index idx under
// key.
func (r *Reporter) queueBy(idx, key string) {
	if key == "" {
		return
	}
	objs, _ := r.vaIdx.ByIndex(idx, key)
	for _, o := range objs {
		r.queue.Add(o.(*storagev1.VolumeAttachment).Name)
	}
}

// queuePod queues what a pod with claims concerns: the attachments of its
// node (it may keep them in use) and those of its claims' volumes (it may
// wait for them). Pods without claims do not matter to the rule.
func (r *Reporter) queuePod(p *corev1.Pod) {
	has := false
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		has = true
		if c, err := r.claims.PersistentVolumeClaims(p.Namespace).Get(v.PersistentVolumeClaim.ClaimName); err == nil {
			r.queueBy(byVolume, c.Spec.VolumeName)
		}
	}
	if has {
		r.queueBy(byNode, p.Spec.NodeName)
	}
}

// queueClaim queues the attachments of the claim's volume and those of
// the nodes of the pods using it (a claim that appears or goes changes
// whether their pods' use can be resolved).
func (r *Reporter) queueClaim(c *corev1.PersistentVolumeClaim) {
	r.queueBy(byVolume, c.Spec.VolumeName)
	pods, _ := r.podIdx.ByIndex(byClaim, c.Namespace+"/"+c.Name)
	for _, o := range pods {
		r.queueBy(byNode, o.(*corev1.Pod).Spec.NodeName)
	}
}

// Run waits for the informers (started by their owner) to sync, then
// works the queue until ctx ends.
func (r *Reporter) Run(ctx context.Context) error {
	defer r.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return errors.New("stale: informer caches did not sync")
	}
	r.log.Info("stale volumeattachment report started", "grace", r.cfg.Grace, "delete", r.cfg.Delete)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for r.processNext(ctx) {
		}
	}()
	<-ctx.Done()
	r.queue.ShutDown()
	<-done
	return nil
}

func (r *Reporter) processNext(ctx context.Context) bool {
	name, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(name)
	if err := r.sync(ctx, name); err != nil {
		r.log.Warn("stale volumeattachment: check failed, will retry", "va", name, "err", err)
		r.queue.AddRateLimited(name)
		return true
	}
	r.queue.Forget(name)
	return true
}

// sync checks one attachment on the informers' objects and moves it
// through holding → reported (→ deleted), or drops it.
func (r *Reporter) sync(ctx context.Context, name string) error {
	va, err := r.vas.Get(name)
	if apierrors.IsNotFound(err) {
		r.drop(name, nil, "", "it is gone")
		return nil
	}
	if err != nil {
		return err
	}
	a, err := gather(ctx, listerSource{r}, va)
	if err != nil {
		return err
	}
	refusals := diagnose.StaleAttachment(a)
	if r.cfg.checked != nil {
		r.cfg.checked(name, refusals)
	}
	if len(refusals) > 0 {
		r.drop(name, va, diagnose.VolumeOf(va), diagnose.Refusals(refusals))
		return nil
	}

	now := r.cfg.Now()
	deleting := va.DeletionTimestamp != nil
	r.mu.Lock()
	h := r.held[name]
	restarted := h == nil || h.uid != va.UID || h.deleting != deleting || (!deleting && h.rv != va.ResourceVersion)
	wasReported := h != nil && h.reported
	if restarted {
		h = &held{uid: va.UID, rv: va.ResourceVersion, deleting: deleting, since: now, sent: map[string]time.Time{}}
		r.held[name] = h
	}
	r.setGauge()
	// wait is how long until the attachment is reported: the rule must
	// hold for the grace without a break, and one being deleted must have
	// been deleted for the grace too (before that it is detaching
	// normally). The deletionTimestamp is the API server's clock: a skew
	// only moves the second condition, never the first.
	wait := r.cfg.Grace - now.Sub(h.since)
	if deleting {
		wait = max(wait, r.cfg.Grace-now.Sub(va.DeletionTimestamp.Time))
	}
	first := wait <= 0 && !h.reported
	if first {
		h.reported = true
		r.setGauge()
	}
	reported := h.reported
	r.mu.Unlock()

	if restarted {
		// Debug for a first look: a pod that ends leaves its attachment
		// looking stale for the seconds until the attach/detach controller
		// detaches it, every time.
		why, level := "the attachment is new to this fencer", slog.LevelDebug
		switch {
		case deleting && wasReported:
			why, level = "it is being deleted (detaching)", slog.LevelInfo
		case deleting:
			why = "it is being deleted (detaching)"
		case wasReported:
			why, level = "the VolumeAttachment changed", slog.LevelInfo
		}
		r.decisionAt(level, DecisionHolding, va, staleReason(a, now), "grace", r.cfg.Grace, "why", why)
	}
	if !reported {
		r.queue.AddAfter(name, wait)
		return nil
	}
	waiting := r.waiting(va)
	if first {
		r.decision(DecisionReported, va, staleReason(a, now), "since", h.since, "waiting", podNames(waiting))
	}
	r.queue.AddAfter(name, r.report(va, a, h, waiting, now))
	if !r.cfg.Delete {
		return nil
	}
	return r.applyCure(ctx, va, h, waiting)
}

// drop forgets an attachment the rule refuses (or that is gone); a held
// or reported one gets a log line saying why.
func (r *Reporter) drop(name string, va *storagev1.VolumeAttachment, volume, why string) {
	was, reported := r.forget(name)
	if !was {
		return
	}
	node, level := "", slog.LevelDebug
	if va != nil {
		node = va.Spec.NodeName
	}
	if reported {
		level = slog.LevelInfo
	}
	r.log.Log(context.Background(), level, "stale volumeattachment", "decision", DecisionCleared, "va", name, "node", node, "volume", volume, "reason", why)
}

// forget drops name's state and reports whether there was any, and
// whether it had been reported.
func (r *Reporter) forget(name string) (was, reported bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, was := r.held[name]
	delete(r.held, name)
	r.setGauge()
	return was, was && h.reported
}

// setGauge sets fenced_stale_volume_attachments; r.mu is held.
func (r *Reporter) setGauge() {
	n := 0
	for _, h := range r.held {
		if h.reported {
			n++
		}
	}
	r.cfg.Metrics.Stale.Set(float64(n))
}

// decision logs one decision about va: a warning when it is reported or
// deleted, else information.
func (r *Reporter) decision(d Decision, va *storagev1.VolumeAttachment, reason string, attrs ...any) {
	level := slog.LevelInfo
	if d == DecisionReported || d == DecisionDeleted || d == DecisionReleased {
		level = slog.LevelWarn
	}
	r.decisionAt(level, d, va, reason, attrs...)
}

func (r *Reporter) decisionAt(level slog.Level, d Decision, va *storagev1.VolumeAttachment, reason string, attrs ...any) {
	r.log.Log(context.Background(), level, "stale volumeattachment",
		append([]any{"decision", d, "va", va.Name, "node", va.Spec.NodeName, "volume", diagnose.VolumeOf(va), "reason", reason}, attrs...)...)
}

// listerSource reads the rule's inputs from the Reporter's informers.
type listerSource struct{ r *Reporter }

func (s listerSource) node(_ context.Context, name string) (*corev1.Node, error) {
	return s.r.nodes.Get(name)
}

func (s listerSource) volume(_ context.Context, name string) (*corev1.PersistentVolume, error) {
	return s.r.volumes.Get(name)
}

func (s listerSource) podsOn(_ context.Context, node string) ([]*corev1.Pod, error) {
	objs, err := s.r.podIdx.ByIndex(byNode, node)
	pods := make([]*corev1.Pod, len(objs))
	for i, o := range objs {
		pods[i] = o.(*corev1.Pod)
	}
	return pods, err
}

func (s listerSource) claim(_ context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	return s.r.claims.PersistentVolumeClaims(namespace).Get(name)
}

// waiting are the pods that wait for the attachment's volume: not
// finished, not Running, bound to another node, using a claim bound to
// the volume.
func (r *Reporter) waiting(va *storagev1.VolumeAttachment) []*corev1.Pod {
	pv := diagnose.VolumeOf(va)
	if pv == "" {
		return nil
	}
	var out []*corev1.Pod
	claims, _ := r.claimIx.ByIndex(byVolume, pv)
	for _, o := range claims {
		c := o.(*corev1.PersistentVolumeClaim)
		pods, _ := r.podIdx.ByIndex(byClaim, c.Namespace+"/"+c.Name)
		for _, po := range pods {
			p := po.(*corev1.Pod)
			if p.Spec.NodeName != "" && p.Spec.NodeName != va.Spec.NodeName && !diagnose.Finished(p) && p.Status.Phase != corev1.PodRunning {
				out = append(out, p)
			}
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

// report sends the Events of a reported attachment: one on each waiting
// pod, or one on the attachment when none waits; each object gets one
// every eventRepeat at most, all of them within the Reporter's budget. It
// returns when to look again (to repeat, or to send what the budget held
// back).
func (r *Reporter) report(va *storagev1.VolumeAttachment, a diagnose.Attachment, h *held, waiting []*corev1.Pod, now time.Time) time.Duration {
	type target struct {
		key string
		obj runtime.Object
		msg string
	}
	var targets []target
	for _, p := range waiting {
		targets = append(targets, target{"pod/" + p.Namespace + "/" + p.Name, p,
			fmt.Sprintf("volume %s is held by VolumeAttachment %s on node %s: %s. %s", diagnose.VolumeOf(va), va.Name, va.Spec.NodeName, staleReason(a, now), r.nextStep(va))})
	}
	if len(targets) == 0 {
		targets = append(targets, target{"volumeattachment/" + va.Name, va,
			fmt.Sprintf("%s (no pod waits for volume %s). %s", staleReason(a, now), diagnose.VolumeOf(va), r.nextStep(va))})
	}
	next := eventRepeat
	for _, t := range targets {
		r.mu.Lock()
		last, sent := h.sent[t.key]
		r.mu.Unlock()
		if sent && now.Sub(last) < eventRepeat {
			next = min(next, eventRepeat-now.Sub(last))
			continue
		}
		if !r.events.Allow() {
			next = min(next, eventRetry)
			continue
		}
		r.cfg.Recorder.Event(t.obj, corev1.EventTypeWarning, string(vocab.EventStaleVolumeAttachment), t.msg)
		r.mu.Lock()
		h.sent[t.key] = now
		r.mu.Unlock()
	}
	return next
}

// nextStep says what happens next, for the Events.
func (r *Reporter) nextStep(va *storagev1.VolumeAttachment) string {
	if va.DeletionTimestamp != nil {
		if r.cfg.Delete {
			return "fenced removes its finalizers after checking again (policy.deleteStaleVolumeAttachments)"
		}
		return "Deleting it again does nothing: the CSI driver must detach it, or, after checking with `fenced diagnose`, remove its finalizers: `kubectl patch volumeattachment " + va.Name + ` --type=merge -p '{"metadata":{"finalizers":null}}'` + "`"
	}
	if r.cfg.Delete {
		return "fenced deletes it after checking again (policy.deleteStaleVolumeAttachments)"
	}
	return "Check with `fenced diagnose`; delete it with `fenced diagnose --fix` or `kubectl delete volumeattachment " + va.Name + "`"
}

// applyCure is the switch's cure (policy.deleteStaleVolumeAttachments): the
// Cure re-checks the attachment held (its UID; for a delete the
// resourceVersion held too) on objects read from the API server now, then
// deletes it, or, stuck in deletion, removes its finalizers. A conflict is
// not retried here: the attachment is held again, for the whole grace,
// before the next try.
func (r *Reporter) applyCure(ctx context.Context, cached *storagev1.VolumeAttachment, h *held, waiting []*corev1.Pod) error {
	o := r.curer.Apply(ctx, Target{Name: cached.Name, UID: h.uid, ResourceVersion: h.rv, Action: ActionFor(cached)})
	switch o.Result {
	case ResultDeleted, ResultReleased:
		r.cured(o, waiting)
		return nil
	case ResultGone, ResultNoFinalizers:
		return nil // the informer tells
	case ResultUnreadable:
		r.decision(DecisionKept, cached, o.Why)
		return o.Err
	case ResultReplaced, ResultChanged:
		// The informer has not shown the change yet; when it does, the
		// grace starts again.
		r.decision(DecisionKept, o.VA, "it changed since it was held for stale")
		return nil
	case ResultRefused, ResultConflict:
		// The API server knows better than the informers: the grace
		// starts again once they agree it is stale.
		r.forget(cached.Name)
		r.decision(DecisionKept, o.VA, o.Why)
		return nil
	case ResultNodeGone:
		r.decision(DecisionKept, o.VA, o.Why+": a person decides ("+byHand(o.VA)+")")
		return nil
	}
	r.decision(DecisionKept, o.VA, o.Why) // held, unchecked, write failed
	return o.Err
}

// cured counts, logs and records a deletion or release.
func (r *Reporter) cured(o Outcome, waiting []*corev1.Pod) {
	va := o.VA
	r.cfg.Metrics.Deleted.Inc()
	r.forget(va.Name)
	reason := staleReason(o.Attachment, r.cfg.Now())
	if o.Result == ResultReleased {
		r.decision(DecisionReleased, va, reason, "uid", va.UID, "resourceVersion", va.ResourceVersion,
			"finalizers", strings.Join(o.Finalizers, ","), "waiting", podNames(waiting))
		r.record(va, waiting, vocab.EventStaleVolumeAttachmentReleased, fmt.Sprintf("fenced removed finalizer %s of VolumeAttachment %s of volume %s on node %s, stuck in deletion (checked again right before: %s)",
			strings.Join(o.Finalizers, ", "), va.Name, diagnose.VolumeOf(va), va.Spec.NodeName, reason))
		return
	}
	r.decision(DecisionDeleted, va, reason, "uid", va.UID, "resourceVersion", va.ResourceVersion, "waiting", podNames(waiting))
	r.record(va, waiting, vocab.EventStaleVolumeAttachmentDeleted, fmt.Sprintf("fenced deleted VolumeAttachment %s of volume %s on node %s (checked again right before: %s)",
		va.Name, diagnose.VolumeOf(va), va.Spec.NodeName, reason))
}

// byHand is how a person cures a deleted Node's attachment.
func byHand(va *storagev1.VolumeAttachment) string {
	if va.DeletionTimestamp != nil {
		return "removing its finalizers by hand"
	}
	return "fenced diagnose --fix"
}

// record sends the Normal Event of a deletion or release on the
// VolumeAttachment and on the pods that waited for it.
func (r *Reporter) record(va *storagev1.VolumeAttachment, waiting []*corev1.Pod, reason vocab.EventReason, msg string) {
	r.cfg.Recorder.Event(va, corev1.EventTypeNormal, string(reason), msg)
	for _, p := range waiting {
		r.cfg.Recorder.Event(p, corev1.EventTypeNormal, string(reason), msg)
	}
}

// staleReason says why the rule holds the attachment for stale, and, for
// one being deleted at now, that its detach is stuck.
func staleReason(a diagnose.Attachment, now time.Time) string {
	var s string
	if a.Node == nil {
		s = fmt.Sprintf("node/%s no longer exists", a.VA.Spec.NodeName)
	} else {
		s = fmt.Sprintf("node/%s is Ready, no pod there uses volume %s and its kubelet does not list it in volumesInUse", a.Node.Name, diagnose.VolumeOf(a.VA))
	}
	return s + stuckDetach(a.VA, now)
}

// stuckDetach is what staleReason adds for a VolumeAttachment being
// deleted: since when, what keeps it (its finalizers) and the CSI
// driver's last detach error; empty when it is not being deleted.
func stuckDetach(va *storagev1.VolumeAttachment, now time.Time) string {
	if va == nil || va.DeletionTimestamp == nil {
		return ""
	}
	s := fmt.Sprintf("; its detach is stuck: deleted %s ago", now.Sub(va.DeletionTimestamp.Time).Round(time.Second))
	if len(va.Finalizers) > 0 {
		s += ", kept by finalizer " + strings.Join(va.Finalizers, ", ")
	}
	if e := va.Status.DetachError; e != nil && e.Message != "" {
		s += fmt.Sprintf(", detachError: %q", e.Message)
	} else {
		s += ", no detachError"
	}
	return s
}

func podNames(ps []*corev1.Pod) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Namespace + "/" + p.Name
	}
	return strings.Join(s, ",")
}

func unwrap(o any) any {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return o
}
