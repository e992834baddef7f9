// Package agent assembles `fenced agent` in two steps, as
// node-problem-detector's main does: build every part and wire them
// (metrics, one informer factory for cluster-scoped objects shared with
// the fencer, the gossip ring, the clean-shutdown watcher and — when the
// configuration holds power devices (a BMC inventory, fence devices) —
// the fencer, which gets gossip
// changes directly from the ring), then run them in order and supervise
// them in one loop that decides what stops what and tells systemd how the
// agent is doing.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/metrics"
	"fenced.io/fenced/pkg/shutdown"
	"fenced.io/fenced/pkg/stale"
	"fenced.io/fenced/pkg/systemd"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// Options are the per-host settings (flags) plus the loaded configuration.
type Options struct {
	Config *config.Config
	// Client reaches the API server; it is not used before Run.
	Client  kubernetes.Interface
	Version string
	// NodeName is this host's Kubernetes node name.
	NodeName string
	// BootID of this host (it changes on every boot).
	BootID string
	// GossipBind is the address gossip listens on ("" = all).
	GossipBind string
	// GossipAdvertise is the address peers reach this agent at ("" = the
	// InternalIP of this host's Node). It must be one of the Node's
	// addresses: agents answer a fencer's liveness challenges only there.
	GossipAdvertise string
	// Seeds are extra addresses to join through, besides the Nodes'
	// InternalIPs.
	Seeds []string
	// InsecureGossip allows a ring without encryption.
	InsecureGossip bool
	// MetricsAddress serves /metrics, /healthz, /readyz ("" disables).
	MetricsAddress string
	// Profiling serves Go's profiles at MetricsAddress under
	// /debug/pprof/ too.
	Profiling bool
	// ClientCertificate reads the PEM of the client certificate Client
	// authenticates with (a systemd agent's kubeconfig), for the gauges of
	// its validity; nil when it authenticates otherwise (a pod's service
	// account token).
	ClientCertificate func() ([]byte, error)
	// KubeletRootDir is where the kubelet mounts CSI volumes
	// (shutdown.DefaultKubeletRootDir when empty).
	KubeletRootDir string
	// DialLogind reaches systemd-logind (shutdown.DialLogind when nil).
	DialLogind func() (shutdown.Logind, error)
	Logger     *slog.Logger
}

// Agent is a checked agent, ready to run.
type Agent struct {
	o Options
	// keySource and keys are the gossip keys' files and what they held
	// at start (both zero with --insecure-gossip).
	keySource keySource
	keys      heartbeat.KeySet
	inv       *device.Inventory // nil for an observer
}

// New checks everything that can be checked before touching the network —
// the node name, the gossip key, the BMC inventory — so that bad input
// stops the agent with a clear message before it joins anything.
func New(o Options) (*Agent, error) {
	a := &Agent{o: o}
	if o.NodeName == "" {
		return nil, errors.New("no node name: pass --node-name or set NODE_NAME")
	}
	if o.BootID == "" {
		return nil, errors.New("no boot ID: check --boot-id-file")
	}
	var err error
	if !o.InsecureGossip {
		if a.keySource, err = keySourceOf(o.Config.Gossip); err != nil {
			return nil, err
		}
		if a.keys, err = a.keySource.load(componentLog(o.Logger, componentAgent)); err != nil {
			return nil, err
		}
	}
	if o.Config.CanFence() {
		if a.inv, err = device.NewInventory(o.Config, componentLog(o.Logger, componentDevice)); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Run builds the agent's parts, then runs and supervises them until ctx
// ends; it leaves the ring cleanly on the way out.
func (a *Agent) Run(ctx context.Context) error {
	p, err := a.build()
	if err != nil {
		return err
	}
	defer p.close()
	return p.run(ctx)
}

// parts are the agent's components, built and wired to each other by
// build but not started: nothing listens to gossip, watches the API or
// talks to logind before run.
type parts struct {
	o    Options
	log  *slog.Logger
	role string

	reg *prometheus.Registry
	// srv serves /metrics, /healthz and /readyz on lis (both nil when
	// --metrics-address is empty).
	srv *http.Server
	lis net.Listener
	// joined is /readyz: in the gossip ring.
	joined atomic.Bool

	// factories are the informer factories, started and shut down
	// together: first the one factory for cluster-scoped objects, then
	// the fencer's namespaced Lease factories.
	factories []informers.SharedInformerFactory
	nodes     coreinformers.NodeInformer

	// signingKey is this run's own key: what this node says about itself
	// that fencers act on (a clean shutdown, its leave) is signed with
	// it, and it is published where only this node may write
	// (pkg/identity/publish). ownKey publishes it and gives it to the ring
	// once published (ownkey.go).
	signingKey *identity.Key
	ownKey     *ownKey
	// dog is this node's watchdog, when its levels end in the watchdog
	// level (watchdog.go); nil otherwise.
	dog *nodeWatchdog

	ring *heartbeat.Ring
	// keys reads the gossip key files again and changes the ring's keys
	// (nil with --insecure-gossip).
	keys     *keyReloader
	watcher  *shutdown.Watcher // nil when shutdown.announce is off
	graceful *gracefulWatch
	fencer   *fencing.Fencer // nil on an observer
	// config reads the configuration file again and applies a changed
	// one to the fencer (nil on an observer: it reads the file at start
	// only).
	config *configReloader
	// state publishes the fencer's state on its key Lease for `fenced
	// status` (nil on an observer). Display only.
	state *fencerStateWriter
	// stale reports stale VolumeAttachments; it runs with the fencer
	// (nil on an observer).
	stale *stale.Reporter

	closers []func() // run by close, last first
}

// build constructs every part of the agent and wires them: the metrics
// registry and server, one informer factory for cluster-scoped objects
// (Nodes for the ring's seeds and admission and this host's address;
// Nodes and VolumeAttachments for the fencer: Nodes are watched once per
// process), the fencer's Lease informers, the gossip ring (not joined),
// the shutdown watcher and the fencer, which gets the ring's member
// changes directly (Ring.OnChange → Fencer.Notify).
func (a *Agent) build() (_ *parts, err error) {
	o := a.o
	p := &parts{o: o, log: componentLog(o.Logger, componentAgent), role: heartbeat.RoleObserver, reg: metrics.NewRegistry(o.Version)}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if a.inv != nil {
		p.role = heartbeat.RoleFencer
	}
	p.reg.MustRegister(metrics.NewAgentReady(p.role, p.ready))
	if o.ClientCertificate != nil {
		p.reg.MustRegister(metrics.NewClientCertificate(o.ClientCertificate))
	}

	if o.MetricsAddress != "" {
		if p.lis, err = net.Listen("tcp", o.MetricsAddress); err != nil {
			return nil, fmt.Errorf("--metrics-address: %w", err)
		}
		p.closers = append(p.closers, func() { _ = p.lis.Close() })
		p.srv = &http.Server{Handler: metrics.Handler(p.reg, p.ready, o.Profiling), ReadHeaderTimeout: 5 * time.Second}
	}

	cluster := informers.NewSharedInformerFactoryWithOptions(o.Client, 0, informers.WithTransform(fencing.TrimForCache))
	p.factories = append(p.factories, cluster)
	p.nodes = cluster.Core().V1().Nodes()
	p.nodes.Informer() // registered before the factory starts
	nodeLister := p.nodes.Lister()

	if p.signingKey, err = identity.NewKey(); err != nil {
		return nil, err
	}
	keyPublished := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fenced_agent_key_published",
		Help: "1 once this agent's own signing key is published on its Lease (it signs nothing before); 0 means fencers take none of this node's word (its clean shutdowns need the BMC).",
	})
	p.reg.MustRegister(keyPublished)

	hb := heartbeat.Config{
		NodeName: o.NodeName, BindAddr: o.GossipBind, BindPort: o.Config.Gossip.Port,
		ClusterName: o.Config.ClusterName, SecretKey: a.keys.Primary, SecondaryKeys: a.keys.Secondary, Insecure: o.InsecureGossip,
		ProbeInterval: o.Config.Gossip.ProbeInterval, ProbeTimeout: o.Config.Gossip.ProbeTimeout,
		SuspicionMult: o.Config.Gossip.SuspicionMult, GossipInterval: o.Config.Gossip.GossipInterval,
		BeatInterval: o.Config.Gossip.BeatInterval,
	}
	p.ring, err = heartbeat.New(hb, heartbeat.Options{
		Meta: heartbeat.Meta{Node: o.NodeName, BootID: o.BootID, Role: p.role,
			State: vocab.AnnounceRunning, Agent: o.Version},
		Seeds:           func() []string { return seeds(nodeLister, o.NodeName, o.Config.Gossip.Port, o.Seeds) },
		IsNode:          func(name string) bool { _, err := nodeLister.Get(name); return err == nil },
		ChallengerAddrs: func(name string) []string { return gossipAddrs(nodeLister, name, o.Config.Gossip.Port) },
		Logger:          componentLog(o.Logger, componentRing),
		// No Key: the ring signs nothing until the key is published.
	})
	if err != nil {
		return nil, fmt.Errorf("gossip ring: %w", err)
	}
	p.ownKey = newOwnKey(o, p.signingKey, p.ring, keyPublished, p.log)
	p.dog = newNodeWatchdog(o, p.signingKey, p.ownKey.isPublished, openDevice, p.reg, componentLog(o.Logger, componentWatchdog))
	if !o.InsecureGossip {
		p.keys = newKeyReloader(a.keySource, p.ring, a.keys, componentLog(o.Logger, componentRing))
		p.reg.MustRegister(gossipKeysCollector{keyring: p.ring.Keyring, filesOK: p.keys.filesOK.Load})
	}
	p.reg.MustRegister(metrics.NewMembers(p.memberStates), metrics.NewGossipOversized(p.ring.OversizedRefused),
		metrics.NewBeatsReceived(p.ring.BeatsReceived), metrics.NewBeatsRefused(p.ring.BeatsRefused))

	if o.Config.Shutdown.Announce {
		p.watcher = p.buildWatcher()
	}
	p.graceful = p.newGracefulWatch()

	if a.inv != nil {
		// The inventory in force when the agent stops: the reloader's.
		p.closers = append(p.closers, func() {
			if p.config != nil {
				_ = p.config.Inventory().Close()
			} else {
				_ = a.inv.Close()
			}
		})
		recorder, stopRecorder := taint.NewRecorder(o.Client, "fenced")
		p.closers = append(p.closers, stopRecorder)
		// The fencer's Leases come from factories of their own, limited to
		// their namespace: see fencing.NewInformers.
		inf, leaseFactories := fencing.NewInformers(o.Client, cluster, o.Config.Fencer.LeaseNamespace)
		p.factories = append(p.factories, leaseFactories...)
		s := fencerSettings(o.Config, a.inv)
		p.fencer, err = fencing.New(fencing.Config{
			Identity: o.NodeName, Client: o.Client, Informers: inf, Inventory: s.Inventory, Members: p.ring,
			Tainter: taint.NewTainter(o.Client, o.NodeName, recorder), Recorder: recorder,
			Policy: s.Policy, LeaseNamespace: o.Config.Fencer.LeaseNamespace,
			LeaseDuration:           s.LeaseDuration,
			Verify:                  s.Verify,
			MonitorInterval:         monitorInterval(o.Config.Fencer),
			MaxConcurrentPowerReads: o.Config.Fencer.MaxConcurrentPowerReads,
			GossipPort:              o.Config.Gossip.Port,
			Metrics:                 fencing.NewMetrics(p.reg), Logger: componentLog(o.Logger, componentFencer),
		})
		if err != nil {
			return nil, err
		}
		p.reg.MustRegister(metrics.NewInventoryNodes(p.fencer.InventoryNodes))
		p.config = newConfigReloader(o.Config, a.inv, p.fencer, p.reg,
			componentLog(o.Logger, componentAgent), componentLog(o.Logger, componentDevice))
		p.config.eventsOn(recorder, nodeLister, o.NodeName)
		p.state = newFencerStateWriter(o.Client, o.Config.Fencer.LeaseNamespace, o.NodeName, p.fencerState,
			componentLog(o.Logger, componentAgent))
		p.config.onApply = p.state.changed
		// The stale VolumeAttachment report shares the fencer's Node and
		// VolumeAttachment informers (the one cluster-scoped factory).
		p.stale, err = stale.New(stale.Config{
			Client: o.Client, Informers: stale.NewInformers(cluster), Recorder: recorder,
			Grace: o.Config.Policy.StaleAttachmentGrace, Delete: o.Config.Policy.DeleteStaleVolumeAttachments,
			Held: p.fencer.HoldsEffects, Metrics: stale.NewMetrics(p.reg), Logger: componentLog(o.Logger, componentStale),
		})
		if err != nil {
			return nil, err
		}
		// Gossip changes go to the fencer as an informer's events would:
		// Notify only queues (see its comment for why it is safe to call
		// under memberlist's lock).
		f := p.fencer
		p.ring.OnChange(func(m heartbeat.Member) { f.Notify(m.Name) })
	}
	return p, nil
}

// monitorInterval is the fencer's device check interval. What the fencer
// section leaves unset is zero in fencing.Config, and fencing.New and
// device.VerifyOptions apply their defaults; only the checks' zero means
// off, so their default is applied here, where the file left it unset.
func monitorInterval(f config.Fencer) time.Duration {
	if f.MonitorInterval == nil {
		return fencing.DefaultMonitorInterval
	}
	return *f.MonitorInterval
}

// buildWatcher builds the clean-shutdown watcher: a logind delay lock, and
// on shutdown shutting-down → (no CSI mounts) shutdown-complete → leave.
func (p *parts) buildWatcher() *shutdown.Watcher {
	dial := p.o.DialLogind
	if dial == nil {
		dial = shutdown.DialLogind
	}
	root := p.o.KubeletRootDir
	if root == "" {
		root = shutdown.DefaultKubeletRootDir
	}
	lockHeld := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fenced_shutdown_lock_held",
		Help: "1 while the agent holds its logind shutdown delay lock (needed to announce a clean shutdown), else 0.",
	})
	p.reg.MustRegister(lockHeld)
	return shutdown.New(shutdown.Config{
		Dial: dial, Ring: p.ring, Logger: componentLog(p.o.Logger, componentShutdown),
		OnLock: func(held bool) {
			if held {
				lockHeld.Set(1)
			} else {
				lockHeld.Set(0)
			}
		},
		Mounts: shutdown.MountTable{Path: shutdown.DefaultMountInfo, KubeletRootDir: root},
	})
}

// close releases what build made, last first.
func (p *parts) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// ready is /readyz: the agent is in the gossip ring.
func (p *parts) ready() error {
	if !p.joined.Load() {
		return errors.New("not yet in the gossip ring")
	}
	return nil
}

// fencerState is what a fencer publishes of itself for `fenced status`:
// ready (in the ring), and the configuration in force.
func (p *parts) fencerState() publish.FencerState {
	cfg, hash := p.config.InForce()
	return publish.FencerState{Ready: p.ready() == nil, Mode: cfg.Policy.Mode, DryRun: cfg.Policy.DryRun,
		InventoryNodes: p.fencer.InventoryNodes(), ConfigHash: hash}
}

// memberStates are the states of the ring's members, for fenced_members.
func (p *parts) memberStates() []vocab.MemberState {
	ms := p.ring.Members()
	out := make([]vocab.MemberState, len(ms))
	for i, m := range ms {
		out[i] = m.State
	}
	return out
}

// run starts the parts in the order they need — the metrics server, the
// informers, this host's address from its Node, the published key (a
// bounded wait), the ring — then supervises them until ctx ends.
func (p *parts) run(ctx context.Context) error {
	o, log := p.o, p.log
	if p.srv != nil {
		go func() { _ = p.srv.Serve(p.lis) }()
		log.Info("serving metrics and health", "address", p.lis.Addr().String())
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = p.srv.Shutdown(sctx)
		}()
	}

	// The informers stop with informerCtx: cancelled before Shutdown waits
	// for them, also when run returns with an error and ctx still runs.
	informerCtx, stopInformers := context.WithCancel(ctx)
	for _, f := range p.factories {
		f.Start(informerCtx.Done())
	}
	defer func() {
		stopInformers()
		for _, f := range p.factories {
			f.Shutdown()
		}
	}()
	// Nodes tell who may join the ring and where to find it.
	log.Info("waiting for the Node list", "node", o.NodeName)
	if err := waitNodeList(ctx, o.Client, p.nodes.Informer().HasSynced, nodeListReportEvery, log); err != nil {
		return err
	}
	advertise := o.GossipAdvertise
	if advertise == "" {
		var err error
		if advertise, err = waitInternalIP(ctx, p.nodes.Informer(), p.nodes.Lister(), o.NodeName, log); err != nil {
			return err
		}
	} else if p.fencer != nil {
		if err := advertisedAtNode(o.NodeName, advertise, gossipAddrs(p.nodes.Lister(), o.NodeName, o.Config.Gossip.Port), o.Config.Gossip.Port); err != nil {
			return err
		}
	}

	p.ownKey.start(ctx)
	// After the key: the answer is written on the key's Lease.
	defer background(ctx, p.graceful.run)()
	if p.dog != nil {
		// Its statement waits for the key; stopped, the loop leaves the
		// watchdog armed (the next run must open it within its timeout).
		defer background(ctx, p.dog.run)()
	}

	if p.state != nil {
		// From before the join, so that status shows a fencer that is
		// joining as not ready rather than not at all; after the key,
		// whose Lease it writes on.
		defer background(ctx, p.state.run)()
	}

	if o.InsecureGossip {
		log.Warn("gossip is not encrypted (--insecure-gossip): anyone on the network can join the ring and pose as a node")
	}
	if err := p.ring.Join(ctx, advertise); err != nil {
		return fmt.Errorf("joining the gossip ring: %w", err)
	}
	defer func() {
		if p.watcher != nil && isClosed(p.watcher.Leaving()) {
			return // the shutdown watcher left the ring already
		}
		if p.watcher != nil && p.watcher.StoppedWithHostRunning() {
			// Stopped while the host runs on (a rollout, a restart): said
			// in this agent's signed word before the leave, so that fencers
			// leave the node alone while its kubelet is Ready
			// (policy.restartWait) instead of reading its power and warning.
			if err := p.ring.Announce(vocab.AnnounceRestarting); err != nil {
				log.Warn("announcing the restart before leaving the ring: fencers may suspect this node until it is back", "err", err)
			} else {
				log.Info("stopping while the host runs on: announced a restart before leaving the gossip ring")
			}
		}
		if err := p.ring.Leave(heartbeat.DefaultLeaveTimeout); err != nil {
			log.Warn("leaving the gossip ring", "err", err)
		}
	}()
	if p.keys != nil {
		log.Info("gossip keys", "source", p.keys.src.String(), "keys", p.keys.applied.String(), "encrypt", p.ring.Keyring().Encrypt)
		// Stopped before the ring is left (the defer above runs after).
		defer background(ctx, p.keys.run)()
	}
	if p.config != nil {
		defer background(ctx, p.config.run)()
	}
	p.joined.Store(true)
	if p.state != nil {
		p.state.changed() // ready now
	}
	log.Info("agent started", "role", p.role, "node", o.NodeName, "boot", o.BootID, "gossip", p.ring.LocalAddr(),
		"config", o.Config.Source, "bmcs", len(o.Config.BMCs), "fenceDevices", len(o.Config.Devices), "version", o.Version)
	if p.watcher == nil {
		log.Info("clean-shutdown announcements are off (shutdown.announce: false): fencers will need the BMC to confirm this node off")
	}
	return p.supervise(ctx)
}

// background runs f in a goroutine with a context of its own, derived
// from ctx; the function it returns cancels that context and waits for f
// to return.
func background(ctx context.Context, f func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// supervise runs the shutdown watcher and the fencer, keeps systemd
// informed and handles the end of every part; it is the one place that
// decides what stops what:
//
//   - ctx ends (SIGTERM): the watcher is waited for — stopped in the middle
//     of the host's shutdown it takes a last look at the mounts, announces
//     and leaves, and the ring must not be left before that — and so is
//     the fencer;
//   - the watcher left the ring (the host shuts down): the fencer stops and
//     the agent waits to be stopped with the host;
//   - the watcher or the fencer fails, or the ring shuts down on its own:
//     the agent stops with an error.
//
// systemd's watchdog is fed only while this loop turns, so a wedged agent
// gets restarted.
func (p *parts) supervise(ctx context.Context) error {
	log := p.log
	watcherDone := make(chan error, 1)
	var watcherLeft <-chan struct{}
	if p.watcher != nil {
		watcherLeft = p.watcher.Left()
		go func() { watcherDone <- p.watcher.Run(ctx) }()
	}
	fencerDone := make(chan error, 1)
	fencerCtx, cancelFencer := context.WithCancel(ctx)
	defer cancelFencer()
	if p.fencer != nil {
		go func() { fencerDone <- p.runFencer(fencerCtx) }()
	}
	watcherRunning, fencerRunning := p.watcher != nil, p.fencer != nil
	stopFencer := func() {
		if fencerRunning {
			cancelFencer()
			<-fencerDone
			fencerRunning = false
		}
	}

	// STATUS tells how the ring looks; it is refreshed on the tick while
	// the agent is in the ring, and only sent when it changed.
	lastStatus := ""
	status := func() {
		alive, all := 0, 0
		for _, s := range p.memberStates() {
			all++
			if s == vocab.MemberAlive {
				alive++
			}
		}
		if s := fmt.Sprintf("%s: %d of %d gossip members alive", p.role, alive, all); s != lastStatus {
			lastStatus = s
			_, _ = systemd.Notify(systemd.Status(s))
		}
	}
	status()
	if _, err := systemd.Notify(systemd.Ready); err != nil {
		log.Warn("could not notify systemd", "err", err)
	}
	var loopTurned atomic.Int64
	loopTurned.Store(time.Now().UnixNano())
	go func() {
		err := systemd.RunWatchdog(ctx, func() error {
			if stale := time.Since(time.Unix(0, loopTurned.Load())); stale > 10*time.Second {
				return fmt.Errorf("main loop has not turned for %s", stale)
			}
			return nil
		})
		if err != nil {
			log.Error("systemd watchdog stopped; systemd will restart the agent", "err", err)
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	ringDone := p.ring.Done()
	inRing := true

	for {
		select {
		case <-tick.C:
			loopTurned.Store(time.Now().UnixNano())
			if inRing {
				status()
			}
		case <-ctx.Done():
			log.Info("agent stopping", "reason", "signal")
			_, _ = systemd.Notify(systemd.Stopping)
			if watcherRunning {
				<-watcherDone
			}
			stopFencer()
			return nil
		case <-ringDone:
			ringDone = nil
			if p.watcher != nil && isClosed(p.watcher.Leaving()) {
				continue // the watcher's leave closed the ring; its Left case follows
			}
			stopFencer()
			return errors.New("gossip ring shut down")
		case <-watcherLeft:
			// The host is shutting down and the watcher left the ring: stop
			// fencing from here and wait to be stopped with the host.
			watcherLeft, ringDone, inRing = nil, nil, false
			p.joined.Store(false)
			res := p.watcher.Result()
			stopFencer()
			if p.dog != nil && res.Complete {
				// Announced: the node's own word is the evidence now, and
				// the rest of its shutdown must not be cut short.
				p.dog.disarm(ctx)
			}
			log.Info("host shutting down: left the gossip ring; waiting to be stopped", "result", res.String())
			_, _ = systemd.Notify(systemd.Status("host shutting down: " + res.String()))
		case err := <-watcherDone:
			watcherRunning = false
			if err != nil {
				_, _ = systemd.Notify(systemd.Stopping)
				stopFencer()
				p.watcherFailed(err)
				return err
			}
		case err := <-fencerDone:
			fencerRunning = false
			return fmt.Errorf("fencer stopped: %w", err)
		}
	}
}

// watcherFailed is told why the shutdown watcher stopped the agent. When
// the host's shutdown was cancelled after this run left the ring, this
// run's key is withdrawn: its last words (a signed shutdown-complete and
// leave) are about a shutdown that did not happen, and the host runs on in
// the same boot.
func (p *parts) watcherFailed(err error) {
	if !errors.Is(err, shutdown.ErrCancelledAfterLeave) {
		return
	}
	// Not the run's context: a stop signal may have ended it meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), keyWithdrawTimeout)
	defer cancel()
	_ = p.ownKey.withdraw(ctx) // logged
}

// keyWithdrawTimeout bounds the withdrawal of the key on the way out.
const keyWithdrawTimeout = 10 * time.Second

// runFencer runs the fencer and its stale VolumeAttachment report until
// ctx ends or one of them stops; the other is stopped then, and the first
// error returned.
func (p *parts) runFencer(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- p.fencer.Run(ctx) }()
	go func() {
		err := p.stale.Run(ctx)
		if err != nil {
			err = fmt.Errorf("stale volumeattachment report: %w", err)
		}
		errs <- err
	}()
	err := <-errs
	cancel()
	return errors.Join(err, <-errs)
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// gossipAddrs are Node name's addresses (InternalIP and ExternalIP, as
// the API has them) at the gossip port: where its agent may be answered.
// A fencer advertises its InternalIP unless gossip.advertise says
// otherwise, which must then be one of its Node's addresses.
func gossipAddrs(nodes corelisters.NodeLister, name string, port int) []string {
	n, err := nodes.Get(name)
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			out = append(out, net.JoinHostPort(a.Address, strconv.Itoa(port)))
		}
	}
	return out
}

// advertisedAtNode checks a fencer's advertise address against its
// Node's gossip addresses (own): agents would leave the challenges of a
// fencer that replies from elsewhere unanswered, and every node would look
// silent to it. A host whose Node has no addresses at all is no ring member
// for agents that know the Nodes (IsNode), so there is nothing to check.
func advertisedAtNode(node, advertise string, own []string, port int) error {
	if len(own) == 0 || slices.Contains(own, net.JoinHostPort(advertise, strconv.Itoa(port))) {
		return nil
	}
	return fmt.Errorf("gossip advertise address %s is not one of Node %s's addresses %v: agents answer a fencer's liveness challenges only at an address the Kubernetes API gives its Node", advertise, node, own)
}

// seeds are the other Nodes' InternalIPs at the gossip port, plus extras.
func seeds(nodes corelisters.NodeLister, self string, port int, extra []string) []string {
	out := append([]string(nil), extra...)
	all, _ := nodes.List(labels.Everything())
	for _, n := range all {
		if n.Name == self {
			continue
		}
		if ip := taint.InternalIP(n); ip != "" {
			out = append(out, net.JoinHostPort(ip, strconv.Itoa(port)))
		}
	}
	return out
}

// waitInternalIP waits for this host's Node to appear with an InternalIP
// (an agent may start before its kubelet registers the node). It wakes on
// the informer's events for that Node, not on a timer.
func waitInternalIP(ctx context.Context, informer cache.SharedIndexInformer, nodes corelisters.NodeLister, name string, log *slog.Logger) (string, error) {
	changed := make(chan struct{}, 1)
	poke := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && n.Name == name {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, obj any) { poke(obj) },
	})
	if err != nil {
		return "", err
	}
	defer func() { _ = informer.RemoveEventHandler(reg) }()
	// A reminder in the log while waiting; the wait itself is event-driven.
	remind := time.NewTicker(10 * time.Second)
	defer remind.Stop()
	for first := true; ; first = false {
		n, err := nodes.Get(name)
		if err == nil {
			if ip := taint.InternalIP(n); ip != "" {
				return ip, nil
			}
		} else if !apierrors.IsNotFound(err) {
			return "", err
		}
		if first {
			log.Info("waiting for this host's Node and its InternalIP (or pass --gossip-advertise-address)", "node", name)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-changed:
		case <-remind.C:
			log.Info("still waiting for this host's Node and its InternalIP (or pass --gossip-advertise-address)", "node", name)
		}
	}
}
