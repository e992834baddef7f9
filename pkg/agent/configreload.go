package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
)

// A fencer reads its configuration file again every configReloadInterval
// and applies a changed one without a restart: validated as at start
// (config.Parse, then the inventory's drivers built, fence agents' metadata
// checked), it is applied whole or not at all. What a reload may change
// and what needs a restart is config.RestartNeeded's: a file that also
// changes a restart-only setting is applied for the rest, the restart-only
// settings named (log, Event, fenced_config_restart_pending) — refusing
// the whole file would keep a corrected BMC address out of force for the
// sake of, say, a gossip timing, and the two never meet: each reloadable
// setting is read afresh by each decision and power request, each
// restart-only one by a part built once. An invalid file is refused, the
// configuration in force kept, and the refusal said once per distinct
// content (log, Event ConfigurationRefused on the fencer's Node,
// fenced_config_reload_total{result="refused"} and
// fenced_config_last_reload_success 0).
//
// A file is judged only once two polls in a row read the same bytes. The
// gossip keys are read twice back to back (gossipkeys.go) because a key
// directory is several files, which a Secret volume's update changes
// together while a read may straddle it; the configuration is one file,
// which a ConfigMap volume's symlink swap replaces whole, but which an
// editor or a configuration tool on a systemd host may truncate and
// rewrite in place: two reads a poll apart do not catch it half-written
// where two back to back might, and a file being written is neither
// applied nor refused.

// configReloadInterval is how often a fencer reads its configuration file
// again; a change is applied at the second poll that reads it, so within
// two intervals (the kubelet takes up to a minute or so to update a
// ConfigMap volume).
const configReloadInterval = 3 * time.Second

// maxEventMessage bounds an Event's message: a refused file may have many
// problems, every one of which is in the log.
const maxEventMessage = 1000

// reconfigurer is the fencer, as the reloader sees it.
type reconfigurer interface {
	Reconfigure(fencing.Settings) <-chan struct{}
}

// configReloader polls the configuration file and applies what changed.
// Only its run goroutine uses it, but for Inventory after run ended.
type configReloader struct {
	path string
	// running is the configuration the agent started with: its
	// restart-only settings are the ones in force.
	running *config.Config
	inv     *device.Inventory // in force
	fencer  reconfigurer
	log     *slog.Logger
	// devLog is the drivers' log (component device).
	devLog *slog.Logger

	// events go on this fencer's own Node.
	events record.EventRecorder
	node   string
	nodes  corelisters.NodeLister

	metrics configMetrics

	// inForce is the content applied last (nil until a poll has read the
	// file the agent started with); judged the content last applied or
	// refused, so that each is judged once; pending the content the last
	// poll read, not judged yet.
	inForce, judged, pending []byte
	problems                 problemOnce

	// current is the configuration in force and its hash, for the
	// fencer's published state (read from another goroutine);
	// onApply, when set, is told after each applied reload.
	current atomic.Pointer[configInForce]
	onApply func()
}

// configInForce is the configuration a fencer runs with and the hash of
// its file (hashText; "" when the file no longer held it at start).
type configInForce struct {
	cfg  *config.Config
	hash string
}

// newConfigReloader builds the reloader of the configuration cfg, in
// force with inventory inv. The file is read once now: when it still
// holds cfg, that content is in force and is not judged again.
func newConfigReloader(cfg *config.Config, inv *device.Inventory, f reconfigurer, reg prometheus.Registerer, log, devLog *slog.Logger) *configReloader {
	r := &configReloader{path: cfg.Source, running: cfg, inv: inv, fencer: f, log: log, devLog: devLog, metrics: newConfigMetrics(reg)}
	r.current.Store(&configInForce{cfg: cfg})
	if data, err := os.ReadFile(r.path); err == nil {
		if now, err := config.Parse(data, r.path); err == nil && reflect.DeepEqual(now, cfg) {
			r.inForce, r.judged = data, data
			r.metrics.hash.Set(contentHash(data))
			r.current.Store(&configInForce{cfg: cfg, hash: hashText(data)})
		}
	}
	r.metrics.success.Set(1)
	r.metrics.successTime.SetToCurrentTime()
	return r
}

// eventsOn sets where the reloader's Events go: the Node named node, as
// nodes has it (a reference by name while it has not synced yet).
func (r *configReloader) eventsOn(events record.EventRecorder, nodes corelisters.NodeLister, node string) {
	r.events, r.nodes, r.node = events, nodes, node
}

// run polls the file every configReloadInterval until ctx ends.
func (r *configReloader) run(ctx context.Context) { pollEvery(ctx, configReloadInterval, r.check) }

// Inventory is the inventory in force.
func (r *configReloader) Inventory() *device.Inventory { return r.inv }

// check reads the file once: a content read at two polls in a row and not
// judged yet is applied or refused.
func (r *configReloader) check() {
	data, err := os.ReadFile(r.path)
	if err != nil {
		// A file that cannot be read is judged like an invalid one, but at
		// once: there is no content to see settle.
		r.pending = nil
		r.refuse(nil, fmt.Errorf("config: %w", err))
		return
	}
	if same(data, r.judged) {
		r.pending = nil
		return
	}
	if !same(data, r.pending) {
		r.pending = data // judged at the next poll, if it stays
		return
	}
	r.pending = nil
	r.judge(data)
}

// same reports whether content a is b, which is nil when there is none (an
// empty file is content).
func same(a, b []byte) bool { return b != nil && bytes.Equal(a, b) }

// judge applies data, or refuses it.
func (r *configReloader) judge(data []byte) {
	if same(data, r.inForce) {
		// Back to the content in force after a refused one: nothing to do.
		r.judged = data
		r.problems.fixed(r.log, "configuration file is back to the configuration in force", "config", r.path)
		r.metrics.success.Set(1)
		return
	}
	cfg, err := config.Parse(data, r.path)
	if err != nil {
		r.refuse(data, err)
		return
	}
	inv, retired, err := r.inv.Rebuild(cfg, r.devLog)
	if err != nil {
		r.refuse(data, fmt.Errorf("config %s: %w", r.path, err))
		return
	}
	drained := r.fencer.Reconfigure(fencerSettings(cfg, inv))
	r.inv, r.inForce, r.judged = inv, data, data
	// The retired drivers may still serve reads and power actions started
	// before the swap: closed once those have ended.
	go func() {
		<-drained
		for _, b := range retired {
			_ = b.Close()
		}
	}()
	r.problems = problemOnce{}
	r.metrics.reloads.WithLabelValues(reloadApplied).Inc()
	r.metrics.success.Set(1)
	r.metrics.successTime.SetToCurrentTime()
	r.metrics.hash.Set(contentHash(data))
	r.current.Store(&configInForce{cfg: cfg, hash: hashText(data)})
	if r.onApply != nil {
		r.onApply()
	}
	r.log.Info("configuration reloaded", "config", r.path, "sha256", hashText(data),
		"bmcs", len(cfg.BMCs), "fenceDevices", len(cfg.Devices), "mode", cfg.Policy.Mode, "dryRun", cfg.Policy.DryRun)
	r.event(corev1.EventTypeNormal, vocab.EventConfigurationReloaded, fmt.Sprintf(
		"configuration %s (sha256 %s) applied without a restart: power devices, topology, policy and power-action timings",
		r.path, hashText(data)))
	r.restartPending(cfg)
}

// restartPending says which settings of the file now in force wait for a
// restart, when they changed since the last reload.
func (r *configReloader) restartPending(cfg *config.Config) {
	paths := config.RestartNeeded(r.running, cfg)
	if len(paths) == 0 {
		r.metrics.restartPending.Set(0)
		return
	}
	r.metrics.restartPending.Set(1)
	msg := "configuration applied except " + strings.Join(paths, ", ") +
		": these settings take effect when the agent restarts; until then the values it started with stay in force"
	r.log.Warn(msg, "config", r.path)
	r.event(corev1.EventTypeWarning, vocab.EventConfigurationNeedsRestart, msg)
}

// refuse keeps the configuration in force and says why data (nil: a file
// that cannot be read) is refused, once per distinct content and problem.
func (r *configReloader) refuse(data []byte, err error) {
	r.judged = data
	r.metrics.success.Set(0)
	if !r.problems.failed(r.log, "configuration file refused; the configuration in force stays", err, "config", r.path) {
		return
	}
	r.metrics.reloads.WithLabelValues(reloadRefused).Inc()
	msg := "configuration " + r.path + " refused, the configuration in force stays: " + err.Error()
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage-len(" …")] + " …"
	}
	r.event(corev1.EventTypeWarning, vocab.EventConfigurationRefused, msg)
}

// event records an Event on this fencer's Node.
func (r *configReloader) event(typ string, reason vocab.EventReason, msg string) {
	if r.events == nil {
		return
	}
	var obj runtime.Object = &corev1.ObjectReference{Kind: "Node", Name: r.node, UID: types.UID(r.node)}
	if r.nodes != nil {
		if n, err := r.nodes.Get(r.node); err == nil {
			obj = n
		}
	}
	r.events.Event(obj, typ, string(reason), msg)
}

// fencerSettings are what of cfg a running fencer takes, with inv the
// inventory built from it: at start (build) and at each reload.
func fencerSettings(cfg *config.Config, inv *device.Inventory) fencing.Settings {
	return fencing.Settings{Inventory: inv, Policy: cfg.Policy.Policy, LeaseDuration: cfg.Fencer.LeaseDuration,
		Verify: device.VerifyOptions{Timeout: cfg.Fencer.PowerTimeout}}
}

// InForce is the configuration in force and the hash of its file. Safe
// from any goroutine.
func (r *configReloader) InForce() (*config.Config, string) {
	c := r.current.Load()
	return c.cfg, c.hash
}

// hashText is the first six bytes of data's SHA-256 in hex: how the log,
// the Events and the fencer's published state name a configuration file.
func hashText(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// contentHash is the first six bytes of data's SHA-256 as a number, exact
// in a float64: fenced_config_hash, the same on every fencer that runs the
// same file.
func contentHash(data []byte) float64 {
	sum := sha256.Sum256(data)
	var b [8]byte
	copy(b[2:], sum[:6])
	return float64(binary.BigEndian.Uint64(b[:]))
}

// The results of fenced_config_reload_total.
const (
	reloadApplied = "applied"
	reloadRefused = "refused"
)

// configMetrics are the reloader's metrics.
type configMetrics struct {
	reloads        *prometheus.CounterVec
	success        prometheus.Gauge
	successTime    prometheus.Gauge
	hash           prometheus.Gauge
	restartPending prometheus.Gauge
}

func newConfigMetrics(reg prometheus.Registerer) configMetrics {
	m := configMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_config_reload_total",
			Help: "Changed configuration files judged by this fencer, by result: applied (without a restart), refused (invalid or unusable; the configuration in force stays), once per distinct content.",
		}, []string{"result"}),
		success: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_config_last_reload_success",
			Help: "1 when the configuration file holds the configuration in force (or one applied from it), 0 while it holds one that was refused.",
		}),
		successTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration in force was applied: the start, or the last reload.",
		}),
		hash: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_config_hash",
			Help: "The first 48 bits of the SHA-256 of the configuration file in force, as a number: equal on fencers that run the same file (0 until known).",
		}),
		restartPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_config_restart_pending",
			Help: "1 when the configuration in force changed settings that only a restart applies (gossip, cluster name, shutdown, fencer.leaseNamespace, …): they keep the values the agent started with.",
		}),
	}
	reg.MustRegister(m.reloads, m.success, m.successTime, m.hash, m.restartPending)
	for _, r := range []string{reloadApplied, reloadRefused} {
		m.reloads.WithLabelValues(r)
	}
	return m
}
