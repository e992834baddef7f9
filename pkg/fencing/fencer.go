package fencing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	coordinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// MemberSource is the gossip view the fencer reads and the way it asks an
// agent for a proof of life (a *heartbeat.Ring).
type MemberSource interface {
	Member(name string) (heartbeat.Member, bool)
	Alive() int
	Challenge(ctx context.Context, name, addr string) (heartbeat.Proof, error)
}

// Informers are what a fencer watches. Nodes and VolumeAttachments come
// from the process's one factory for cluster-scoped objects (the agent
// reads Nodes from it too); the Leases from factories limited to their
// namespace (see NewInformers).
type Informers struct {
	Nodes             coreinformers.NodeInformer
	VolumeAttachments storageinformers.VolumeAttachmentInformer
	// Leases are the Leases in Config.LeaseNamespace: power Leases and
	// the agents' key Leases.
	Leases coordinformers.LeaseInformer
	// KubeletLeases is the client the fencer watches kubelets' node Leases
	// (KubeletLeaseNamespace) with: one node's at a time, for the nodes it
	// has reason to look at (kubeletlease.go).
	KubeletLeases kubernetes.Interface
	// Pause is the pause ConfigMap (taint.PauseConfigMap in the lease
	// namespace, that one object only); nil: never paused (switches.go).
	Pause coreinformers.ConfigMapInformer
}

// NewInformers takes a fencer's Nodes and VolumeAttachments from cluster,
// the process's shared factory for cluster-scoped objects, and builds a
// factory for the Leases in leaseNamespace: separate, because a factory's
// informers list and watch across all namespaces unless the factory is
// limited to one, and a fencer may read Leases only in leaseNamespace and
// KubeletLeaseNamespace (a namespaced Role in each,
// deploy/daemonset/base). The kubelets' Leases are watched one node at a
// time, with client (kubeletlease.go). The caller starts and shuts down
// the returned factories, as it does cluster.
func NewInformers(client kubernetes.Interface, cluster informers.SharedInformerFactory, leaseNamespace string) (Informers, []informers.SharedInformerFactory) {
	inNS := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(leaseNamespace), trimmed)
	pause := newPauseFactory(client, leaseNamespace)
	return Informers{
		Nodes:             cluster.Core().V1().Nodes(),
		VolumeAttachments: cluster.Storage().V1().VolumeAttachments(),
		Leases:            inNS.Coordination().V1().Leases(),
		KubeletLeases:     client,
		Pause:             pause.Core().V1().ConfigMaps(),
	}, []informers.SharedInformerFactory{inNS, pause}
}

// Config wires a Fencer.
type Config struct {
	// Identity names this fencer in Leases, annotations and Events
	// (its node name).
	Identity string
	// Client writes: Leases, taints, Events. Reads go through Informers.
	Client    kubernetes.Interface
	Informers Informers
	Inventory Inventory
	Members   MemberSource
	Tainter   *taint.Tainter
	Recorder  record.EventRecorder
	Policy    core.Policy
	// LeaseNamespace holds the per-target power Leases.
	LeaseNamespace string
	// LeaseDuration of a power Lease; it is renewed every third of it
	// while a power action runs, so a dead fencer's Lease lapses quickly
	// (0: DefaultLeaseDuration).
	LeaseDuration time.Duration
	// Verify controls how power actions are confirmed.
	Verify device.VerifyOptions
	// GossipPort is where agents listen for gossip, and so for liveness
	// challenges (at their Node's InternalIP).
	GossipPort int
	// ChallengeTimeout bounds the wait for a proof of life (0:
	// DefaultChallengeTimeout).
	ChallengeTimeout time.Duration
	// MonitorInterval is how often every power device is checked
	// (monitor.go); 0 disables the checks (the agent's default is
	// DefaultMonitorInterval).
	MonitorInterval time.Duration
	// MaxConcurrentPowerReads bounds the power reads in flight at once
	// (readgate.go); 0: DefaultMaxConcurrentPowerReads.
	MaxConcurrentPowerReads int
	// Workers carry out decisions for that many nodes at once (0:
	// DefaultWorkers); the decisions themselves are taken one at a time.
	Workers int
	Metrics *Metrics
	Logger  *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Fencer watches Nodes, VolumeAttachments and Leases, runs the decision
// core for every node and carries out its actions. All inputs arrive
// through informers and gossip notifications; there is no polling.
type Fencer struct {
	cfg   Config
	log   *slog.Logger
	queue workqueue.TypedRateLimitingInterface[string]

	nodes  corelisters.NodeLister
	vas    cache.Indexer
	leases coordlisters.LeaseNamespaceLister
	// kubeletLeaseClient watches the kubelets' node Leases (their
	// heartbeats) of the nodes of interest (kubeletlease.go).
	kubeletLeaseClient kubernetes.Interface
	synced             []cache.InformerSynced

	// decideMu makes the decisions one at a time, so that each sees what
	// the ones before it reserved (reserve) while their writes run beside
	// it; taken before mu.
	decideMu sync.Mutex

	mu sync.Mutex
	// state is what this fencer keeps about each node, dropped whole with
	// its Node (nodestate.go).
	state  map[string]*nodeState
	seqs   map[string]seqSeen   // latest signed statement per node (replays)
	forged map[claimID]struct{} // forgeries counted, to count each once
	// forgeryWarnings rate-limits the warnings about forgeries: forgers
	// choose how many distinct claims they send.
	forgeryWarnings *heartbeat.WarnLimiter
	// cleanFences remembers this fencer's own clean-shutdown taints (the
	// storm guard must count them before the informer shows them).
	cleanFences map[string]time.Time
	// fenceable is, per node, whether the last device monitor round found
	// a fencing level that answers.
	fenceable map[string]bool
	// monitored are the devices the last monitor round checked (only the
	// monitor's goroutine uses it).
	monitored map[string]device.Plug

	// pause reads the pause ConfigMap (nil: no pause informer).
	pause corelisters.ConfigMapNamespaceLister
	// pausedSeen is the pause state last reported (switches.go).
	pausedSeen pauseState

	// policyOK: the admission policy binding agent keys to nodes is in
	// force (checkPolicy); policyChecked: it was checked once.
	policyOK      atomic.Bool
	policyChecked bool
	// orderPolicyOK: the fence orders' admission policy is in force
	// (checkPolicy); without it the watchdog level orders and counts
	// nothing.
	orderPolicyOK atomic.Bool

	// keys: the Lease keys shown stale (stalekey.go); under mu.
	keys keyTrust

	// reads bounds the power reads in flight (readgate.go).
	reads *readGate

	// applied is the Settings in force (settings.go), swapped whole by
	// Reconfigure; applyMu orders hold against the swap.
	applied atomic.Pointer[applied]
	applyMu sync.RWMutex

	// history queues the fence history entries to write (history.go).
	history chan taint.HistoryEntry
	// deleted are the fences of deleted Nodes, by node name, remembered
	// for their return (deleted.go); under mu.
	deleted map[string]deletedFence

	bg sync.WaitGroup // BMC calls and renewals, waited for on stop
}

// KubeletLeaseNamespace holds the kubelets' node Leases.
const KubeletLeaseNamespace = corev1.NamespaceNodeLease

// ErrEvidenceVoided is wrapped by a taint write that the evidence no
// longer allowed when it was about to happen.
var ErrEvidenceVoided = errors.New("evidence no longer holds")

const vaByNode = "byNode"

// New builds a Fencer and registers its handlers on cfg.Informers, which
// must not have started yet (an indexer cannot be added to a running
// informer); Run runs it once they are started.
func New(cfg Config) (*Fencer, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.GossipPort == 0 {
		cfg.GossipPort = heartbeat.DefaultPort
	}
	if cfg.ChallengeTimeout <= 0 {
		cfg.ChallengeTimeout = DefaultChallengeTimeout
	}
	if cfg.Metrics == nil {
		// Registered nowhere: a fencer always has its metrics to update.
		cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if cfg.MaxConcurrentPowerReads <= 0 {
		cfg.MaxConcurrentPowerReads = DefaultMaxConcurrentPowerReads
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	f := &Fencer{
		cfg:         cfg,
		log:         cfg.Logger,
		queue:       workqueue.NewTypedRateLimitingQueue(retryLimiter()),
		state:       map[string]*nodeState{},
		seqs:        map[string]seqSeen{},
		forged:      map[claimID]struct{}{},
		cleanFences: map[string]time.Time{},
		fenceable:   map[string]bool{},
		reads:       newReadGate(cfg.MaxConcurrentPowerReads, cfg.Metrics),
		history:     make(chan taint.HistoryEntry, historyQueue),
		deleted:     map[string]deletedFence{},
	}
	f.forgeryWarnings = heartbeat.NewWarnLimiter(forgeryWarningsPerMinute)
	f.applied.Store(&applied{Settings: Settings{Inventory: cfg.Inventory, Policy: cfg.Policy,
		LeaseDuration: cfg.LeaseDuration, Verify: cfg.Verify}.withDefaults()})
	// From here the settings are read from f.applied only, which a reload
	// swaps: cleared, a leftover read of f.cfg's copy fails loudly in tests
	// rather than using settings that may be out of date.
	f.cfg.Inventory, f.cfg.Policy, f.cfg.LeaseDuration, f.cfg.Verify = nil, core.Policy{}, 0, device.VerifyOptions{}
	if err := f.watch(cfg.Informers); err != nil {
		return nil, err
	}
	if err := f.watchPause(cfg.Informers.Pause); err != nil {
		return nil, err
	}
	f.cfg.Metrics.setDryRun(cfg.Policy.DryRun)
	return f, nil
}

// maxRetryDelay bounds the backoff of a node whose sync keeps failing.
// client-go's default grows to 1000 s: after an API server outage of half
// a minute a pending taint would wait 20 s more to be written. A fencer
// has a handful of nodes to retry, so it retries every 2 s at most.
const maxRetryDelay = 2 * time.Second

// retryLimiter is client-go's default controller rate limiter with the
// per-item backoff capped at maxRetryDelay.
func retryLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Notify tells the fencer that the gossip view of name changed. Quorum
// depends on every member, so targets that are not healthy are looked at
// again too.
//
// It is the ring's change handler (heartbeat.Ring.OnChange), called with
// memberlist's node lock held: it only queues names and holds f.mu for a
// map walk. That is safe because nothing holds f.mu while calling into the
// ring (observe, evidenceCheck and startChallenge read Members with f.mu
// released; TestNotifyFromInsideTheRing holds the fencer to it).
func (f *Fencer) Notify(name string) {
	f.queue.Add(name)
	var others []string
	f.mu.Lock()
	for n, s := range f.state {
		if s.target != nil && s.target.Phase != core.PhaseHealthy && n != name {
			others = append(others, n)
		}
	}
	f.mu.Unlock()
	for _, n := range others {
		f.queue.Add(n)
	}
}

// watch registers the fencer's handlers and indexer on its informers:
// every change queues the node it is about.
func (f *Fencer) watch(inf Informers) error {
	nodeInf, vaInf, leaseInf := inf.Nodes, inf.VolumeAttachments, inf.Leases
	f.kubeletLeaseClient = inf.KubeletLeases
	if err := vaInf.Informer().AddIndexers(cache.Indexers{vaByNode: func(obj any) ([]string, error) {
		return []string{obj.(*storagev1.VolumeAttachment).Spec.NodeName}, nil
	}}); err != nil {
		return err
	}
	enqueue := func(name string) {
		if name != "" {
			f.queue.Add(name)
		}
	}
	handlers := []struct {
		inf  cache.SharedIndexInformer
		name func(any) string
		// changed, when set, filters updates: only those it reports
		// queue the node.
		changed func(old, new any) bool
	}{
		// A kubelet rewrites its Node's status now and then without
		// changing anything a decision reads: at 1000 Nodes, deciding on
		// each was a tenth of the fencer's CPU at rest.
		{nodeInf.Informer(), func(o any) string { return metaName(o) }, nodeChanged},
		{vaInf.Informer(), func(o any) string {
			if va, ok := unwrap(o).(*storagev1.VolumeAttachment); ok {
				return va.Spec.NodeName
			}
			return ""
		}, nil},
		{leaseInf.Informer(), func(o any) string {
			if l, ok := unwrap(o).(*coordinationv1.Lease); ok {
				return leaseTarget(l)
			}
			return ""
		}, nil},
	}
	for _, h := range handlers {
		name, changed := h.name, h.changed
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { enqueue(name(o)) },
			UpdateFunc: func(old, o any) {
				if changed == nil || changed(old, o) {
					enqueue(name(o))
				}
			},
			DeleteFunc: func(o any) { enqueue(name(o)) },
		}); err != nil {
			return err
		}
		f.synced = append(f.synced, h.inf.HasSynced)
	}
	f.nodes = nodeInf.Lister()
	f.vas = vaInf.Informer().GetIndexer()
	f.leases = leaseInf.Lister().Leases(f.cfg.LeaseNamespace)
	return nil
}

// Run waits for the informers (started by their owner) to sync, then runs
// the worker until ctx ends.
func (f *Fencer) Run(ctx context.Context) error {
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		f.checkPolicy(ctx)
	}()
	defer func() {
		f.queue.ShutDown()
		f.unwatchKubeletLeases()
		f.bg.Wait()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), f.synced...) {
		return errors.New("fencer: informer caches did not sync")
	}
	s := f.settings()
	f.log.Info("fencer started", "identity", f.cfg.Identity, "mode", s.Policy.Mode,
		"bmcs", len(s.Inventory.Nodes()), "leaseNamespace", f.cfg.LeaseNamespace, "dryRun", s.Policy.DryRun)
	if s.Policy.DryRun {
		f.log.Warn("dry-run (policy.dryRun): deciding and reporting everything, changing nothing — no taint, no Ready=False, no pod deleted, no power switched")
	}

	// The workers are waited for on return like the background calls: a
	// decision still running must not outlive Run (and log after it). The
	// queue hands a node to one worker at a time.
	for range f.cfg.Workers {
		f.bg.Add(1)
		go func() {
			defer f.bg.Done()
			for f.processNext(ctx) {
			}
		}()
	}
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		f.monitorDevices(ctx)
	}()
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		f.writeHistory(ctx)
	}()
	<-ctx.Done()
	return nil
}

func (f *Fencer) processNext(ctx context.Context) bool {
	name, quit := f.queue.Get()
	if quit {
		return false
	}
	defer f.queue.Done(name)
	if err := f.sync(ctx, name); err != nil {
		f.log.Error("fencer: sync failed, will retry", "node", name, "err", err)
		f.queue.AddRateLimited(name)
		return true
	}
	f.queue.Forget(name)
	return true
}

// sync runs one decision for node name and carries out its actions.
func (f *Fencer) sync(ctx context.Context, name string) error {
	if name == f.cfg.Identity {
		return nil // a fencer is never its own target
	}
	// One decision at a time (decideMu): the cluster-wide guards count
	// what the decisions before this one reserved, and their writes run
	// beside it.
	f.decideMu.Lock()
	// One decision, one set of settings: a reload during it applies to
	// the next.
	settings := f.settings()
	o, node, err := f.observe(name, settings)
	if err != nil {
		f.decideMu.Unlock()
		return err
	}
	f.mu.Lock()
	s := f.stateOf(name)
	if s.target == nil {
		s.target = &core.Target{Name: name}
	}
	t := s.target
	before := t.Phase
	d := t.Step(o, settings.Policy)
	suspectSince := t.SuspectSince()
	gone := d.Phase == core.PhaseHealthy && !o.Node.Exists
	if gone {
		f.forget(name)
	} else {
		s.reserve(d.Actions)
		defer f.unreserve(name)
		f.watchKubeletLease(ctx, name, s, leaseInterest(d.Phase, o.Member))
	}
	f.mu.Unlock()
	f.decideMu.Unlock()

	if !gone {
		f.cfg.Metrics.setPhase(name, before, d.Phase)
	}
	for _, tr := range d.Transitions {
		if !tr.Allowed() {
			f.log.Error("the decision core made a transition its table does not have: a bug in pkg/fencing/core", "node", name, "from", string(tr.From), "to", string(tr.To), "reason", d.Reason)
		}
	}
	if before != d.Phase || significant(d.Actions) {
		f.log.Info("decision", "node", name, "from", string(before), "phase", string(d.Phase), "reason", d.Reason,
			"actions", actionNames(d.Actions), "evidence", evidenceMethod(d.Actions))
	}
	var errs []error
	for _, a := range d.Actions {
		if err := f.execute(ctx, name, node, a, suspectSince); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.Kind, err))
		}
	}
	return errors.Join(errs...)
}

// observe assembles the core's input from the listers, gossip and the
// BMC state. node is nil when the Node does not exist.
func (f *Fencer) observe(name string, settings *applied) (core.Observation, *corev1.Node, error) {
	now := f.cfg.Now()
	o := core.Observation{Now: now}
	node, err := f.nodes.Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return o, nil, err
	}
	if err == nil {
		node = f.freshest(node)
		o.Node = nodeObs(node)
		o.Node.Excluded = taint.ExcludedBy(node)
		vas, _ := f.vas.ByIndex(vaByNode, name)
		o.Node.VolumeAttachments = len(vas)
		o.Node.KubeletRenew = f.kubeletRenew(name)
		// A node this fencer has seen Ready is not joining, however soon
		// after its registration it stopped (the registration-time
		// heuristic of neverReady is for nodes seen only after a restart).
		f.mu.Lock()
		s := f.stateOf(name)
		if o.Node.Ready == core.ReadyTrue {
			s.seenReady = true
		}
		if s.seenReady {
			o.Node.NeverReady = false
		}
		if o.Node.Evidence != nil {
			o.Node.PodsForceDeleted = s.podsDeleted.After(o.Node.Evidence.At)
		}
		o.Node.FencedWhenDeleted = f.fencedWhenDeleted(name, now)
		f.mu.Unlock()
	} else {
		node = nil
	}
	o.Member = f.memberObs(name)
	if level := watchdogLevel(settings.Inventory, name); level > 0 {
		o.Watchdog = f.watchdogObs(name, level, now, o.Node.KubeletRenew)
	}
	configured := settings.Inventory.Fenceable(name)
	f.mu.Lock()
	if s, ok := f.state[name]; ok {
		o.BMC, o.Agent = s.power, s.agent
	}
	cleanFences := map[string]bool{}
	for n, at := range f.cleanFences {
		if now.Sub(at) < settings.Policy.StormWindow {
			cleanFences[n] = true
		} else {
			delete(f.cleanFences, n)
		}
	}
	// What the other nodes' decisions reserved counts as done: their
	// workers may still be writing it.
	powerActions, pendingTaints := map[string]bool{}, map[string]bool{}
	// The Nodes this fencer wrote and the informer may not show yet: only
	// these need freshest below (a lock each), not every Node listed.
	written := map[string]bool{}
	for n, s := range f.state {
		if n == name {
			continue
		}
		if s.written != nil {
			written[n] = true
		}
		if s.acquiring || s.renew != nil {
			powerActions[n] = true
		}
		if s.taintPending != "" {
			pendingTaints[n] = true
		}
		if s.taintPending == vocab.EvidenceCleanShutdown {
			cleanFences[n] = true
		}
	}
	f.mu.Unlock()
	o.BMC.Configured = configured

	all, err := f.nodes.List(labels.Everything())
	if err != nil {
		return o, node, err
	}
	o.Cluster.Nodes = len(all)
	o.Cluster.GossipAlive = f.cfg.Members.Alive()
	o.Cluster.Paused, o.Cluster.PauseReason = f.paused()
	excluded, newer := 0, 0
	for _, n := range all {
		if taint.ExcludedBy(n) != "" {
			excluded++
		}
		m, known := f.cfg.Members.Member(n.Name)
		gone := known && m.State.Gone()
		if written[n.Name] {
			n = f.freshest(n)
		}
		fenced := taint.AppliedByFenced(n) && taint.HasTaint(n) || pendingTaints[n.Name]
		if ready, _ := readyCondition(n); ready != core.ReadyTrue || gone || fenced {
			o.Cluster.Unhealthy++
		}
		if fenced {
			ev, ok, err := taint.EvidenceOf(n)
			if ok && err == nil && ev.Method == vocab.EvidenceCleanShutdown && now.Sub(ev.At) < settings.Policy.StormWindow {
				cleanFences[n.Name] = true
			}
			if taint.NewerFormat(err) > 0 {
				newer++
			}
		}
		_, isCP := n.Labels["node-role.kubernetes.io/control-plane"]
		if n.Name != name && isCP && (fenced || powerActions[n.Name] || f.leaseActive(n.Name, now) != "" || f.ordered(n)) {
			o.Cluster.ControlPlaneDown++
		}
	}
	f.cfg.Metrics.NodesExcluded.Set(float64(excluded))
	f.cfg.Metrics.NodesNewerEvidence.Set(float64(newer))
	leases, err := f.leases.List(labels.Everything())
	if err != nil {
		return o, node, err
	}
	for _, l := range leases {
		target := strings.TrimPrefix(l.Name, LeasePrefix)
		if target == name || !strings.HasPrefix(l.Name, LeasePrefix) {
			continue
		}
		if f.leaseActive(target, now) != "" {
			powerActions[target] = true
		}
	}
	o.Cluster.PowerActions = len(powerActions)
	o.Cluster.LeaseHeld = f.leaseActive(name, now) == f.cfg.Identity
	delete(cleanFences, name)
	o.Cluster.CleanShutdownFences = len(cleanFences)
	return o, node, nil
}

// memberObs is what gossip says now of node's agent, its word checked
// (signedKept); the zero MemberObs when the ring never saw it.
func (f *Fencer) memberObs(name string) core.MemberObs {
	m, ok := f.cfg.Members.Member(name)
	if !ok {
		return core.MemberObs{}
	}
	return core.MemberObs{Known: true, State: m.State, Since: m.Since, BootID: m.Meta.BootID, Announced: m.Meta.State,
		Signed: f.signedKept(name, m), Silent: m.Silent, SilentSince: m.SilentSince, Doubt: m.Doubt}
}

// freshest returns the newer of the informer's Node and the one this
// fencer's own taint write returned, forgetting the latter once the
// informer has caught up with it.
func (f *Fencer) freshest(n *corev1.Node) *corev1.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.state[n.Name]
	if !ok || s.written == nil {
		return n
	}
	if newerOrSame(n.ResourceVersion, s.written.ResourceVersion) {
		s.written = nil
		return n
	}
	return s.written
}

// newerOrSame compares resource versions: the API server's are etcd
// revisions, numbers that only grow. Anything else counts as newer, so a
// remembered write is dropped rather than kept over the informer.
func newerOrSame(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 != nil || err2 != nil || x >= y
}

// kubeletRenewFromAPI reads node's kubelet Lease from the API server, not
// the informer, which may lag: its renew time, whether it has one, and the
// read's error. A missing Lease is no error: it has no renew time.
func (f *Fencer) kubeletRenewFromAPI(ctx context.Context, node string) (renew time.Time, ok bool, err error) {
	l, err := f.cfg.Client.CoordinationV1().Leases(KubeletLeaseNamespace).Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, err
	case l.Spec.RenewTime == nil:
		return time.Time{}, false, nil
	}
	return l.Spec.RenewTime.Time, true, nil
}

// evidenceCheck is the last check before a taint write, run by the Tainter
// on the Node it just read: the core's rule (EvidenceHolds) against the
// freshest view there is — that Node, the kubelet's Lease read from the API
// now, the gossip member and the agent's answers as they are now.
func (f *Fencer) evidenceCheck(ctx context.Context, name string, ev *core.Evidence) func(*corev1.Node) error {
	return func(n *corev1.Node) error {
		o := core.Observation{Now: f.cfg.Now(), Node: nodeObs(n)}
		o.Node.KubeletRenew = f.kubeletRenew(name)
		renew, ok, err := f.kubeletRenewFromAPI(ctx, name)
		switch {
		case ok:
			o.Node.KubeletRenew = renew
		case err != nil && !apierrors.IsForbidden(err):
			return fmt.Errorf("reading the kubelet's Lease before the write: %w", err)
		}
		o.Member = f.memberObs(name)
		f.mu.Lock()
		if s, ok := f.state[name]; ok {
			o.Agent, o.BMC = s.agent, s.power
		}
		f.mu.Unlock()
		if ok, why := core.EvidenceHolds(ev, o, f.settings().Policy.MaxEvidenceAge); !ok {
			return fmt.Errorf("%w: %s", ErrEvidenceVoided, why)
		}
		return nil
	}
}

// nodeChanged reports whether a Node's update changes what a decision
// about it reads from the Node: nodeObs, the exclusion labels and the
// InternalIP the agent is challenged at. Anything else — a kubelet's
// status heartbeat, images, capacity — queues nothing.
func nodeChanged(old, new any) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := new.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	// reflect.DeepEqual, not equality.Semantic: the latter has no rule
	// for the time.Time inside NodeObs and panics on its unexported fields.
	return !reflect.DeepEqual(nodeObs(o), nodeObs(n)) ||
		taint.ExcludedBy(o) != taint.ExcludedBy(n) ||
		taint.InternalIP(o) != taint.InternalIP(n)
}

// nodeObs reads what the core needs from a Node.
func nodeObs(n *corev1.Node) core.NodeObs {
	o := core.NodeObs{Exists: true, BootID: n.Status.NodeInfo.BootID, SystemUUID: n.Status.NodeInfo.SystemUUID}
	o.Ready, o.ReadySince = readyCondition(n)
	o.ShuttingDown = kubeletShuttingDown(n)
	o.NeverReady = neverReady(n)
	_, o.ControlPlane = n.Labels["node-role.kubernetes.io/control-plane"]
	if taint.HasTaint(n) && taint.AppliedByFenced(n) {
		o.TaintedByFenced = true
		ev, ok, err := taint.EvidenceOf(n)
		if ok && err == nil {
			o.Evidence = &ev
		}
		o.NewerEvidenceFormat = taint.NewerFormat(err)
	}
	o.Cordon = taint.CordonOf(n)
	if r, ok, err := taint.ReturningOf(n); ok && err == nil {
		o.Returning = &r
	}
	return o
}

// readyCondition returns the status of the Node's Ready condition and
// when it last changed; a Node without one counts as Unknown.
func readyCondition(n *corev1.Node) (core.Ready, time.Time) {
	if c := taint.ReadyCondition(n); c != nil {
		return core.Ready(c.Status), c.LastTransitionTime.Time
	}
	return core.ReadyUnknown, time.Time{}
}

// joinGrace bounds the time between a Node's creation and its kubelet's
// first status report: a Ready condition that last changed within it of
// the creation never changed since, so the node was never Ready.
const joinGrace = 30 * time.Second

// neverReady reports whether the node has not been Ready since it
// registered: no Ready condition yet, or a not-Ready one whose last
// transition came with the registration. A node whose kubelet reports a
// graceful shutdown was running, however young it is.
func neverReady(n *corev1.Node) bool {
	c := taint.ReadyCondition(n)
	if kubeletShuttingDown(n) {
		return false
	}
	return c == nil || c.Status != corev1.ConditionTrue && c.LastTransitionTime.Sub(n.CreationTimestamp.Time) < joinGrace
}

// kubeletShuttingDown reports whether the kubelet's graceful node
// shutdown manager marked the node NotReady because it is shutting down.
func kubeletShuttingDown(n *corev1.Node) bool {
	c := taint.ReadyCondition(n)
	return c != nil && c.Status != corev1.ConditionTrue && strings.Contains(c.Message, "node is shutting down")
}

// execute carries out one action for node name.
func (f *Fencer) execute(ctx context.Context, name string, node *corev1.Node, a core.Action, suspectSince time.Time) error {
	if f.heldNow(name, node, a) {
		return nil
	}
	switch a.Kind {
	case core.ActHeld:
		f.reportHeld(name, node, a)
	case core.ActRequeue:
		f.queue.AddAfter(name, a.After)
	case core.ActReadPower:
		f.startBMC(ctx, name, vocab.OpPowerStatus)
	case core.ActPowerOff:
		f.startBMC(ctx, name, vocab.OpPowerOff)
	case core.ActPowerOn:
		f.startBMC(ctx, name, vocab.OpPowerOn)
	case core.ActAcquireLease:
		return f.acquireLease(ctx, name)
	case core.ActOrderReset:
		return f.writeOrder(ctx, name, a)
	case core.ActWithdrawOrder:
		return f.withdrawOrder(ctx, name, a)
	case core.ActReleaseLease:
		return f.releaseLease(ctx, name)
	case core.ActApplyTaint:
		// The core's evidence as it is, in this fencer's name (a copy: the
		// core keeps its own).
		ev := *a.Evidence
		ev.By = f.cfg.Identity
		written, err := f.cfg.Tainter.ApplyIf(ctx, name, ev, f.evidenceCheck(ctx, name, a.Evidence))
		f.cfg.Metrics.fence(ev.Method, err)
		if errors.Is(err, ErrEvidenceVoided) {
			// Not an error of the fencer's: the node was alive after the
			// evidence (the core voids it too once its view shows why), or
			// the reading got too old (it is read again).
			f.log.Warn("taint not written: the evidence no longer holds", "node", name, "evidence", ev.Method, "why", err)
			f.queue.AddAfter(name, time.Second)
			return nil
		}
		if err != nil {
			f.queue.AddAfter(name, core.TaintRetry)
			return err
		}
		applied := written != nil
		f.wrote(name, written)
		if applied && ev.Method == vocab.EvidenceCleanShutdown {
			f.mu.Lock()
			f.cleanFences[name] = f.cfg.Now()
			f.mu.Unlock()
		}
		if applied {
			if !suspectSince.IsZero() {
				f.cfg.Metrics.DetectionToTaint.Observe(f.cfg.Now().Sub(suspectSince).Seconds())
			}
			f.log.Warn("out-of-service taint applied", "node", name, "evidence", ev.Method, "reason", ev.Reason,
				"sinceSuspected", f.cfg.Now().Sub(suspectSince).Round(time.Millisecond))
			f.recordHistory(taint.HistoryEntry{Node: name, Action: taint.HistoryFence, At: f.cfg.Now(), By: f.cfg.Identity,
				Method: ev.Method, Evidence: ev.Summary(), Reason: ev.Reason})
		}
	case core.ActMarkNotReady:
		n, changed, err := f.cfg.Tainter.MarkNotReady(ctx, name, "fenced: the node is powered off ("+f.cfg.Identity+")")
		if err != nil {
			return err
		}
		if changed {
			f.cfg.Metrics.NotReadyWrites.Inc()
			f.log.Info("Ready=False written: the node is powered off", "node", name)
		} else if n != nil {
			ready, _ := readyCondition(n)
			f.log.Info("Ready left alone: Kubernetes says not ready already", "node", name, "ready", string(ready))
		}
		// The Node as the API has it now: the core decides on it rather
		// than on an informer that may lag (after an API outage, by a
		// minute), which would ask for this write again and again.
		f.wrote(name, n)
	case core.ActForceDeletePods:
		n, err := f.cfg.Tainter.ForceDeletePods(ctx, name)
		if n > 0 {
			f.log.Info("force-deleted pods of fenced node", "node", name, "pods", n)
		}
		if err == nil {
			f.mu.Lock()
			f.stateOf(name).podsDeleted = f.cfg.Now()
			f.mu.Unlock()
		}
		return err
	case core.ActRemoveTaint:
		res, err := f.cfg.Tainter.Remove(ctx, name, a.Message)
		if errors.Is(err, taint.ErrCordonUnsettled) {
			// The node lifecycle controller's answer, when it comes, is
			// a Node update: the informer queues the node again.
			f.log.Info("out-of-service taint kept: the node lifecycle controller has not answered the last cordon change yet", "node", name)
			return nil
		}
		if err != nil {
			return err
		}
		f.wrote(name, res.Node)
		if res.OutOfService {
			f.cfg.Metrics.TaintsRemoved.Inc()
			f.log.Info("out-of-service taint removed, returning taint in its place", "node", name, "reason", a.Message,
				"cordoned", res.Node.Spec.Unschedulable, "cordonIsFenced", res.Record.Cordoned)
			removed := taint.HistoryEntry{Node: name, Action: taint.HistoryUnfence, At: f.cfg.Now(), By: f.cfg.Identity, Reason: a.Message}
			if ev, ok, err := taint.EvidenceOf(node); ok && err == nil {
				// The evidence the taint rested on, as the node showed it
				// before the write that removed it.
				removed.Method, removed.Evidence = ev.Method, ev.Summary()
			}
			f.recordHistory(removed)
		} else if res.Node != nil {
			f.log.Info("returning: cordon changed again for the controller-manager to answer", "node", name, "cordoned", res.Node.Spec.Unschedulable)
		}
	case core.ActLiftReturning:
		written, err := f.cfg.Tainter.Lift(ctx, name, a.Message)
		if errors.Is(err, taint.ErrNotObserved) {
			// The core saw the answer, the Node read for the write does
			// not (someone changed the cordon since): decided again on
			// the next Node update.
			f.log.Info("returning taint kept: the Node read for the write shows no answer of the controller-manager", "node", name)
			return nil
		}
		if err != nil {
			return err
		}
		f.wrote(name, written)
		if written != nil {
			f.log.Info("returning taint lifted", "node", name, "reason", a.Message)
		}
	case core.ActEvent:
		if a.Reason == vocab.EventEvidenceFromNewerFenced {
			// An operator's job, not a passing state: said loudly, once
			// per node (the core's notice).
			f.log.Warn(a.Message, "node", name)
		}
		f.cfg.Recorder.Event(eventTarget(name, node), a.EventType, string(a.Reason), a.Message)
	case core.ActQuietReadOn:
		f.cfg.Metrics.FalseSuspicions.Inc()
		f.log.Info("false suspicion: "+a.Message, "node", name)
	case core.ActNodeDeleted:
		f.nodeDeleted(name, a.Evidence, a.Message)
	case core.ActNodeRegistered:
		f.nodeRegistered(name, a.Evidence, a.Message)
	case core.ActChallenge:
		f.startChallenge(ctx, name, node, a.Within)
	case core.ActSafetyAlarm:
		f.cfg.Metrics.SafetyAlarms.WithLabelValues(string(a.Reason)).Inc()
		f.log.Error("SAFETY ALARM", "node", name, "reason", a.Reason, "message", a.Message)
		if node != nil {
			f.cfg.Recorder.Event(node, corev1.EventTypeWarning, string(a.Reason), a.Message)
		}
	}
	return nil
}

// wrote remembers the Node a write of this fencer returned, and queues
// the node, so that the core goes on from it at once rather than waiting
// for the informer (freshest); a nil Node (nothing written) is ignored.
func (f *Fencer) wrote(name string, n *corev1.Node) {
	if n == nil {
		return
	}
	f.mu.Lock()
	f.stateOf(name).written = n
	f.mu.Unlock()
	f.queue.Add(name)
}

// begin marks an operation on node name as running in its state (made
// when absent) and queues the node, so that the core sees it running;
// false when one is running already. running picks the state's flag.
func (f *Fencer) begin(name string, running func(*nodeState) *bool) (*nodeState, bool) {
	f.mu.Lock()
	st := f.stateOf(name)
	flag := running(st)
	if *flag {
		f.mu.Unlock()
		return st, false
	}
	*flag = true
	f.mu.Unlock()
	f.queue.Add(name)
	return st, true
}

// startBMC runs one BMC operation in the background; its outcome is
// stored for the next Observation and the node is queued again.
func (f *Fencer) startBMC(ctx context.Context, name, op string) {
	// The operation runs on the settings in force now to its end, a
	// reload meanwhile notwithstanding (settings.go).
	settings, release := f.hold()
	levels := settings.Inventory.Levels(name)
	if len(levels) == 0 {
		release()
		return
	}
	st, begun := f.begin(name, func(s *nodeState) *bool { return &s.power.InFlight })
	if !begun {
		release()
		return
	}

	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		defer release()
		start := f.cfg.Now()
		var r *core.Reading
		var fail *core.Failure
		switch op {
		case vocab.OpPowerStatus:
			// The node stays InFlight while it waits for a slot: the core
			// neither asks again nor decides on an older reading meanwhile.
			// Its reading is dated when its own request goes out.
			if !f.reads.acquire(ctx, f.readClassOf(name)) {
				fail = &core.Failure{Op: op, Kind: vocab.KindTimeout, Message: "fencer stopping: read not started", At: f.cfg.Now()}
				break
			}
			start = f.cfg.Now()
			r, fail = f.readLevels(ctx, name, levels)
			f.reads.release()
		case vocab.OpPowerOff:
			r, fail = f.powerOffLevels(ctx, name, levels, settings.Verify)
		case vocab.OpPowerOn:
			fail = f.powerOnLevels(ctx, name, levels, settings.Verify)
		}
		elapsed := f.cfg.Now().Sub(start)
		if now := f.settings(); now != settings && !device.SameLevels(levels, now.Inventory.Levels(name)) {
			f.log.Warn("power devices of the node changed by a reload during the request: its result is not used",
				"node", name, "op", op, "power", readingPower(r), "before", levelNames(levels), "after", levelNames(now.Inventory.Levels(name)))
			r, fail = nil, reloadedMeanwhile(op, f.cfg.Now())
		}
		f.mu.Lock()
		st.power.InFlight = false
		if fail != nil {
			st.power.Failure = fail
		} else if r != nil {
			st.power.Reading = r
		}
		f.mu.Unlock()
		var err error
		if fail != nil {
			err = errors.New(fail.Message)
		}
		f.log.Info("bmc", "node", name, "op", op, "elapsed", elapsed.Round(time.Millisecond),
			"power", readingPower(r), "level", readingLevel(r), "err", err)
		if ctx.Err() == nil {
			f.queue.Add(name)
		}
	}()
}

// readingLevel is the fencing level a reading comes from, for logs: 0 for
// a node's BMC alone.
func readingLevel(r *core.Reading) int {
	if r == nil {
		return 0
	}
	return r.Level
}

func readingPower(r *core.Reading) string {
	if r == nil {
		return ""
	}
	return string(r.Power)
}

// significant reports whether actions deserve a decision log line even
// without a phase change.
func significant(as []core.Action) bool {
	for _, a := range as {
		switch a.Kind {
		case core.ActRequeue, core.ActReadPower:
		default:
			return true
		}
	}
	return false
}

func actionNames(as []core.Action) string {
	var s []string
	for _, a := range as {
		if a.Kind == core.ActEvent || a.Kind == core.ActSafetyAlarm || a.Kind == core.ActHeld {
			s = append(s, string(a.Kind)+":"+string(a.Reason))
		} else if a.Kind != core.ActRequeue {
			s = append(s, string(a.Kind))
		}
	}
	return strings.Join(s, ",")
}

func evidenceMethod(as []core.Action) string {
	for _, a := range as {
		if a.Kind == core.ActApplyTaint && a.Evidence != nil {
			return string(a.Evidence.Method)
		}
	}
	return ""
}

func unwrap(o any) any {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return o
}

func metaName(o any) string {
	if m, ok := unwrap(o).(metav1.Object); ok {
		return m.GetName()
	}
	return ""
}
