// Package agent assembles `fenced agent`: it joins the gossip ring, serves
// metrics and health, tells systemd how it is doing and — when the
// configuration holds a BMC inventory — runs the fencer.
package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/core"
	"fenced.io/fenced/pkg/device"
	"fenced.io/fenced/pkg/fencer"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/kube"
	"fenced.io/fenced/pkg/metrics"
	"fenced.io/fenced/pkg/shutdown"
	"fenced.io/fenced/pkg/systemd"
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
	// InternalIP of this host's Node).
	GossipAdvertise string
	// Seeds are extra addresses to join through, besides the Nodes'
	// InternalIPs.
	Seeds []string
	// InsecureGossip allows a ring without encryption.
	InsecureGossip bool
	// MetricsAddress serves /metrics, /healthz, /readyz ("" disables).
	MetricsAddress string
	// KubeletRootDir is where the kubelet mounts CSI volumes
	// (shutdown.DefaultKubeletRootDir when empty).
	KubeletRootDir string
	// DialLogind reaches systemd-logind (shutdown.DialLogind when nil).
	DialLogind func() (shutdown.Logind, error)
	Logger     *slog.Logger
}

// Agent is a checked agent, ready to run.
type Agent struct {
	o   Options
	key []byte
	inv *device.Inventory // nil for an observer
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
		if o.Config.Gossip.KeyFile == "" {
			return nil, errors.New("no gossip key: set gossip.keyFile in the configuration, or pass --insecure-gossip (anyone on the network could then join the ring)")
		}
		if a.key, err = readKey(o.Config.Gossip.KeyFile, o.Logger); err != nil {
			return nil, err
		}
	}
	if len(o.Config.BMCs) > 0 {
		if a.inv, err = device.NewInventory(o.Config, o.Logger); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// readKey reads a base64 gossip key of 16, 24 or 32 bytes from a file
// that passes config.CheckSecretFile (refused when group or others may
// write it, a warning when others may read it).
func readKey(path string, log *slog.Logger) ([]byte, error) {
	raw, err := readSecretFile(path, log)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("gossip key: %w (create it with `head -c 32 /dev/urandom | base64 > %s && chmod 600 %s`)", err, path, path)
	}
	if err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("gossip key %s: not base64: %w", path, err)
	}
	switch len(key) {
	case 16, 24, 32:
		return key, nil
	}
	return nil, fmt.Errorf("gossip key %s: %d bytes; want 16, 24 or 32 (head -c 32 /dev/urandom | base64)", path, len(key))
}

// Run runs the agent until ctx ends, then leaves the ring cleanly.
func (a *Agent) Run(ctx context.Context) error {
	o, key, inv := a.o, a.key, a.inv
	log := o.Logger
	var err error
	role := "observer"
	if inv != nil {
		role = "fencer"
	}

	reg := metrics.NewRegistry(o.Version)
	var joined atomic.Bool
	if o.MetricsAddress != "" {
		stop, err := serve(o.MetricsAddress, metrics.Handler(reg, func() error {
			if !joined.Load() {
				return errors.New("not yet in the gossip ring")
			}
			return nil
		}), log)
		if err != nil {
			return err
		}
		defer stop()
	}

	// Nodes tell who may join the ring and where to find it.
	factory := informers.NewSharedInformerFactory(o.Client, 0)
	nodes := factory.Core().V1().Nodes()
	nodeLister := nodes.Lister()
	nodeInformer := nodes.Informer()
	// The informers stop with informerCtx: cancelled before Shutdown waits
	// for them, also when Run returns with an error and ctx still runs.
	informerCtx, stopInformers := context.WithCancel(ctx)
	factory.Start(informerCtx.Done())
	defer func() { stopInformers(); factory.Shutdown() }()
	log.Info("waiting for the Node list", "node", o.NodeName)
	if !cache.WaitForCacheSync(ctx.Done(), nodeInformer.HasSynced) {
		return ctx.Err()
	}
	advertise := o.GossipAdvertise
	if advertise == "" {
		if advertise, err = waitInternalIP(ctx, nodeInformer, nodeLister, o.NodeName, log); err != nil {
			return err
		}
	}

	// This run's own key: what this node says about itself that fencers
	// act on (a clean shutdown, its leave) is signed with it, and it is
	// published where only this node may write (pkg/identity/publish).
	signingKey, err := identity.NewKey()
	if err != nil {
		return err
	}
	keyPublished := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fenced_agent_key_published",
		Help: "1 once this agent's own signing key is published on its Lease; 0 means fencers take none of this node's word (its clean shutdowns need the BMC).",
	})
	reg.MustRegister(keyPublished)
	publishKey(ctx, o, signingKey.Public(), keyPublished, log)

	hb := heartbeat.Config{
		NodeName: o.NodeName, BindAddr: o.GossipBind, BindPort: o.Config.Gossip.Port, AdvertiseAddr: advertise,
		ClusterName: o.Config.ClusterName, SecretKey: key, Insecure: o.InsecureGossip,
		ProbeInterval: o.Config.Gossip.ProbeInterval, ProbeTimeout: o.Config.Gossip.ProbeTimeout,
		SuspicionMult: o.Config.Gossip.SuspicionMult, GossipInterval: o.Config.Gossip.GossipInterval,
	}
	if o.InsecureGossip {
		log.Warn("gossip is not encrypted (--insecure-gossip): anyone on the network can join the ring and pose as a node")
	}
	ring, err := heartbeat.Join(ctx, hb, heartbeat.Options{
		Meta: heartbeat.Meta{Node: o.NodeName, BootID: o.BootID, Role: role,
			State: vocab.AnnounceRunning, Agent: o.Version},
		Seeds:  func() []string { return seeds(nodeLister, o.NodeName, o.Config.Gossip.Port, o.Seeds) },
		IsNode: func(name string) bool { _, err := nodeLister.Get(name); return err == nil },
		Logger: log,
		Key:    signingKey,
	})
	if err != nil {
		return fmt.Errorf("joining the gossip ring: %w", err)
	}
	var watcher *shutdown.Watcher
	defer func() {
		if watcher != nil && isClosed(watcher.Leaving()) {
			return // the shutdown watcher left the ring already
		}
		if err := ring.Leave(heartbeat.DefaultLeaveTimeout); err != nil {
			log.Warn("leaving the gossip ring", "err", err)
		}
	}()
	joined.Store(true)
	log.Info("agent started", "role", role, "node", o.NodeName, "boot", o.BootID, "gossip", ring.LocalAddr(),
		"config", o.Config.Source, "bmcs", len(o.Config.BMCs), "version", o.Version)

	// Clean-shutdown announcements: a logind delay lock, and on shutdown
	// shutting-down → (no CSI mounts) shutdown-complete → leave.
	var shutdownLeft <-chan struct{}
	watcherDone := make(chan error, 1)
	if o.Config.Shutdown.Announce {
		dial := o.DialLogind
		if dial == nil {
			dial = shutdown.DialLogind
		}
		root := o.KubeletRootDir
		if root == "" {
			root = shutdown.DefaultKubeletRootDir
		}
		lockHeld := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_shutdown_lock_held",
			Help: "1 while the agent holds its logind shutdown delay lock (needed to announce a clean shutdown), else 0.",
		})
		reg.MustRegister(lockHeld)
		watcher = shutdown.New(shutdown.Config{
			Dial: dial, Ring: ring, Logger: log,
			OnLock: func(held bool) {
				if held {
					lockHeld.Set(1)
				} else {
					lockHeld.Set(0)
				}
			},
			Mounts: shutdown.MountTable{Path: shutdown.DefaultMountInfo, KubeletRootDir: root},
		})
		shutdownLeft = watcher.Left()
		go func() { watcherDone <- watcher.Run(ctx) }()
	} else {
		log.Info("clean-shutdown announcements are off (shutdown.announce: false): fencers will need the BMC to confirm this node off")
	}

	var fencerLoop *fencer.Fencer
	fencerDone := make(chan error, 1)
	fencerCtx, stopFencer := context.WithCancel(ctx)
	defer stopFencer()
	if inv != nil {
		defer inv.Close()
		recorder, stopRecorder := kube.NewRecorder(o.Client, "fenced")
		defer stopRecorder()
		fencerLoop = fencer.New(fencer.Config{
			Identity: o.NodeName, Client: o.Client, Inventory: inv, Members: ring,
			Tainter: kube.NewTainter(o.Client, o.NodeName, recorder), Recorder: recorder,
			Policy: policyOf(o.Config), LeaseNamespace: o.Config.Fencer.LeaseNamespace,
			LeaseDuration: o.Config.Fencer.LeaseDuration,
			Verify:        device.VerifyOptions{Timeout: o.Config.Fencer.PowerTimeout},
			GossipPort:    o.Config.Gossip.Port,
			Metrics:       fencer.NewMetrics(reg), Logger: log,
		})
		go func() { fencerDone <- fencerLoop.Run(fencerCtx) }()
	}

	members := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fenced_members",
		Help: "Gossip ring members by state (alive, suspect, dead, left) as this agent sees them.",
	}, []string{"state"})
	reg.MustRegister(members)
	update := func() {
		counts := map[vocab.MemberState]int{}
		for _, m := range ring.Members() {
			counts[m.State]++
		}
		for _, s := range []vocab.MemberState{vocab.MemberAlive, vocab.MemberSuspect, vocab.MemberDead, vocab.MemberLeft} {
			members.WithLabelValues(string(s)).Set(float64(counts[s]))
		}
		status := fmt.Sprintf("%s: %d of %d gossip members alive", role, counts[vocab.MemberAlive], len(ring.Members()))
		_, _ = systemd.Notify(systemd.Status(status))
	}
	update()
	if _, err := systemd.Notify(systemd.Ready); err != nil {
		log.Warn("could not notify systemd", "err", err)
	}
	// Feed systemd's watchdog (WatchdogSec=) only while this loop keeps
	// turning, so a wedged agent gets restarted; a no-op outside systemd.
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
	alive := time.NewTicker(time.Second)
	defer alive.Stop()
	events := ring.Events()
	fencerRunning := fencerLoop != nil
	watcherRunning := watcher != nil

	for {
		select {
		case <-alive.C:
			loopTurned.Store(time.Now().UnixNano())
		case <-ctx.Done():
			log.Info("agent stopping", "reason", "signal")
			_, _ = systemd.Notify(systemd.Stopping)
			if watcherRunning {
				// Stopped in the middle of the host's shutdown (a DaemonSet
				// pod gets SIGTERM from the kubelet's graceful shutdown): the
				// watcher takes a last look at the mounts, announces and
				// leaves; the ring must not be left before that.
				<-watcherDone
			}
			if fencerRunning {
				<-fencerDone
			}
			return nil
		case m, ok := <-events:
			if !ok {
				if watcher != nil && isClosed(watcher.Leaving()) {
					// The watcher's leave closed the ring; its Left case
					// follows.
					events = nil
					continue
				}
				return errors.New("gossip ring shut down")
			}
			update()
			if fencerLoop != nil {
				fencerLoop.Notify(m.Name)
			}
		case <-shutdownLeft:
			// The host is shutting down and the watcher left the ring: stop
			// fencing from here and wait to be stopped with the host.
			shutdownLeft, events = nil, nil
			joined.Store(false)
			res := watcher.Result()
			if fencerRunning {
				stopFencer()
				<-fencerDone
				fencerRunning = false
			}
			log.Info("host shutting down: left the gossip ring; waiting to be stopped", "result", res.String())
			_, _ = systemd.Notify(systemd.Status("host shutting down: " + res.String()))
		case err := <-watcherDone:
			watcherRunning = false
			if err != nil {
				_, _ = systemd.Notify(systemd.Stopping)
				if fencerRunning {
					stopFencer()
					<-fencerDone
				}
				return err
			}
		case err := <-fencerDone:
			fencerRunning = false
			return fmt.Errorf("fencer stopped: %w", err)
		}
	}
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

// policyOf maps the configuration onto the decision core's policy.
func policyOf(c *config.Config) core.Policy {
	p := c.Policy
	return core.Policy{
		Mode: core.Mode(p.Mode), FenceAfter: p.FenceAfter, MaxUnhealthy: p.MaxUnhealthy,
		MaxConcurrentPowerActions: p.MaxConcurrentPowerActions, FenceDelay: p.FenceDelay,
		PowerOnAfterFence: p.PowerOnAfterFence, ForceDeletePods: p.ForceDeletePods,
		ShutdownWait:   p.ShutdownWait,
		ReadBackoffMin: config.DefaultReadBackoffMin, ReadBackoffMax: config.DefaultReadBackoffMax,
		RecheckPoweredOn: config.DefaultRecheckPoweredOn, ChallengeInterval: config.DefaultChallengeInterval,
		StormWindow: config.DefaultStormWindow, MaxEvidenceAge: config.DefaultMaxEvidenceAge,
	}
}

// seeds are the other Nodes' InternalIPs at the gossip port, plus extras.
func seeds(nodes corelisters.NodeLister, self string, port int, extra []string) []string {
	out := append([]string(nil), extra...)
	all, _ := nodes.List(labels.Everything())
	for _, n := range all {
		if n.Name == self {
			continue
		}
		if ip := kube.InternalIP(n); ip != "" {
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
			if ip := kube.InternalIP(n); ip != "" {
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

// serve starts the metrics and health server and returns its stop func.
func serve(addr string, h http.Handler, log *slog.Logger) (func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-address: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	log.Info("serving metrics and health", "address", l.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// keyPublishWait bounds how long the agent waits to publish its key before
// it joins the ring: an API server that is down must not keep a node out
// of gossip (then fencers need its BMC for a clean shutdown, which is
// safe). Publishing goes on in the background after it.
const keyPublishWait = 30 * time.Second

// publishKey publishes this agent's key on its Lease, retrying with
// backoff. It returns once the key is published or after keyPublishWait,
// leaving the retries running in the background until ctx ends.
func publishKey(ctx context.Context, o Options, key identity.PublicKey, published prometheus.Gauge, log *slog.Logger) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		delay := time.Second
		for attempt := 1; ; attempt++ {
			err := publish.Publish(ctx, o.Client, o.Config.Fencer.LeaseNamespace, o.NodeName, o.BootID, key, time.Now())
			if err == nil {
				published.Set(1)
				log.Info("published this agent's signing key", "lease", o.Config.Fencer.LeaseNamespace+"/"+publish.LeaseName(o.NodeName), "key", key.String())
				return
			}
			if ctx.Err() != nil {
				return
			}
			level := slog.LevelWarn
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				level = slog.LevelError // RBAC or the identity policy refuses: a deployment problem
			}
			log.Log(ctx, level, "cannot publish this agent's signing key; fencers take none of this node's word until it is, so its clean shutdowns need the BMC",
				"err", err, "attempt", attempt, "retryIn", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, time.Minute)
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(keyPublishWait):
		log.Warn("joining the gossip ring before this agent's key is published; still trying", "waited", keyPublishWait)
	}
}
