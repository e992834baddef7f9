package agent

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/internal/testbed/wdemu"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
)

// recordingDevice is a watchdog device that records what is done to it.
type recordingDevice struct {
	pets                     atomic.Int64
	disarmed, closed, opened atomic.Bool
}

func (d *recordingDevice) Pet() error    { d.pets.Add(1); return nil }
func (d *recordingDevice) Disarm() error { d.disarmed.Store(true); return nil }
func (d *recordingDevice) Close() error  { d.closed.Store(true); return nil }

// watchdogBed is one node's agent watchdog on a fake API: its key
// published, a device that records.
type watchdogBed struct {
	t      *testing.T
	client *fake.Clientset
	dog    *nodeWatchdog
	dev    *recordingDevice
	key    *identity.Key
	reg    *prometheus.Registry
	logs   *lockedBuffer
	stop   func()
}

const dogNS = "fenced-system"

func newWatchdogBed(t *testing.T, section string, software bool) *watchdogBed {
	t.Helper()
	cfg, err := config.Parse([]byte("apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\ntopology: {defaults: [[watchdog]]}\n"+section), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := &watchdogBed{t: t, client: fake.NewClientset(), dev: &recordingDevice{}, reg: prometheus.NewRegistry(), logs: &lockedBuffer{}}
	b.key, _ = identity.NewKey()
	if err := publish.Publish(t.Context(), b.client, dogNS, "node-a", "boot-1", b.key.Public(), time.Now()); err != nil {
		t.Fatal(err)
	}
	published := make(chan struct{})
	close(published)
	open := func(path string, timeout time.Duration) (openedDevice, error) {
		b.dev.opened.Store(true)
		return openedDevice{Pettable: b.dev, Identity: "i6300ESB timer", Timeout: timeout, Software: software}, nil
	}
	o := Options{Config: cfg, Client: b.client, NodeName: "node-a", BootID: "boot-1"}
	b.dog = newNodeWatchdog(o, b.key, published, open, b.reg, slog.New(slog.NewTextHandler(b.logs, nil)))
	if b.dog == nil {
		t.Fatal("no watchdog for a node whose levels end in it")
	}
	b.dog.petter.ReadEvery = 50 * time.Millisecond // reads as often as a test wants to wait
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.dog.run(ctx) }()
	b.stop = func() { cancel(); <-done }
	t.Cleanup(b.stop)
	return b
}

func (b *watchdogBed) armed() (identity.Armed, error) {
	l, err := b.client.CoordinationV1().Leases(dogNS).Get(context.Background(), publish.LeaseName("node-a"), metav1.GetOptions{})
	if err != nil {
		return identity.Armed{}, err
	}
	_, a, err := publish.ArmedOf(l)
	return a, err
}

// TestAgentWatchdogArmsStatesAndStops: the agent opens its watchdog once a
// read found no order, pets it, and states it armed, signed with its key;
// an order for its boot stops the petting for good (no magic close), and
// the statement stays; a stop leaves the device armed.
func TestAgentWatchdogArmsStatesAndStops(t *testing.T) {
	b := newWatchdogBed(t, "watchdog: {device: /dev/watchdog0, timeout: 2s, confirm: 3s}\n", false)
	poll.Until(t, 10*time.Second, "the armed statement on the key Lease", func() bool { _, err := b.armed(); return err == nil })
	a, _ := b.armed()
	if a.Timeout != 2*time.Second || a.Confirm != 3*time.Second || a.Device != "i6300ESB timer" || a.Software {
		t.Fatalf("statement %+v", a)
	}
	if got := testutil.ToFloat64(b.dog.armedG); got != 1 {
		t.Errorf("fenced_watchdog_armed = %v", got)
	}
	poll.Until(t, 10*time.Second, "pets", func() bool { return b.dev.pets.Load() > 2 })

	// An order for an earlier boot is not this boot's.
	if err := publish.WriteOrder(t.Context(), b.client, dogNS, "node-a", "boot-0", "cp-1"); err != nil {
		t.Fatal(err)
	}
	before := b.dev.pets.Load()
	poll.Until(t, 10*time.Second, "pets on beside an earlier boot's order", func() bool { return b.dev.pets.Load() > before+1 })

	// This boot's order: no pet after it is read.
	if err := publish.WriteOrder(t.Context(), b.client, dogNS, "node-a", "boot-1", "cp-1"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the order read", func() bool { return strings.Contains(b.logs.String(), "a fence order for this boot exists") })
	stopped := b.dev.pets.Load()
	time.Sleep(time.Second) // a second of pets would be five
	if got := b.dev.pets.Load(); got != stopped {
		t.Fatalf("%d pets after the order was read", got-stopped)
	}
	if b.dev.disarmed.Load() {
		t.Fatal("disarmed on an order: the machine must reset")
	}
	b.stop()
	if b.dev.disarmed.Load() {
		t.Fatal("disarmed on a stop: an agent that stops must leave its machine to the watchdog")
	}
}

// TestAgentWatchdogDisarmsOnlyForACleanShutdown: disarm (after the
// clean-shutdown announcement) does the magic close and withdraws the
// statement, and no statement is written after it.
func TestAgentWatchdogDisarmsOnlyForACleanShutdown(t *testing.T) {
	b := newWatchdogBed(t, "watchdog: {device: /dev/watchdog0}\n", false)
	poll.Until(t, 10*time.Second, "the armed statement", func() bool { _, err := b.armed(); return err == nil })
	b.dog.disarm(t.Context())
	if !b.dev.disarmed.Load() {
		t.Fatal("not disarmed")
	}
	if _, err := b.armed(); !errors.Is(err, publish.ErrNotArmed) {
		t.Fatalf("statement after the disarm: %v", err)
	}
	if got := testutil.ToFloat64(b.dog.armedG); got != 0 {
		t.Errorf("fenced_watchdog_armed = %v", got)
	}
	// A statement still on its way (a retry) is not written after it.
	if stated, err := b.dog.publishArmed(t.Context(), identity.Armed{Timeout: 10 * time.Second, Confirm: 30 * time.Second}); stated || err != nil {
		t.Fatalf("stated %v (%v) after the disarm", stated, err)
	}
	if _, err := b.armed(); !errors.Is(err, publish.ErrNotArmed) || testutil.ToFloat64(b.dog.armedG) != 0 {
		t.Fatalf("statement after a late publication: %v, gauge %v", err, testutil.ToFloat64(b.dog.armedG))
	}
}

// TestAgentWatchdogRefusesSoftware: a software watchdog is disarmed again
// and never stated, unless the section allows it; then it is stated as
// such.
func TestAgentWatchdogRefusesSoftware(t *testing.T) {
	b := newWatchdogBed(t, "watchdog: {device: /dev/watchdog0}\n", true)
	poll.Until(t, 10*time.Second, "the refusal", func() bool { return strings.Contains(b.logs.String(), "software watchdog") })
	if !b.dev.disarmed.Load() {
		t.Error("a refused software watchdog left armed")
	}
	if _, err := b.armed(); !errors.Is(err, publish.ErrNotArmed) {
		t.Fatalf("a refused software watchdog stated: %v", err)
	}

	allowed := newWatchdogBed(t, "watchdog: {device: /dev/watchdog0, allowSoftware: true}\n", true)
	poll.Until(t, 10*time.Second, "the statement", func() bool { _, err := allowed.armed(); return err == nil })
	if a, _ := allowed.armed(); !a.Software {
		t.Fatalf("statement %+v: a software watchdog not stated as one", a)
	}
}

// TestAgentWatchdogOnlyForItsLevel: an agent whose configuration's
// topology does not give its node the watchdog level arms nothing; an
// observer's arms the device its configuration names.
func TestAgentWatchdogOnlyForItsLevel(t *testing.T) {
	cfg, err := config.Parse([]byte("apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\ntopology: {nodes: [{name: other, levels: [[watchdog]]}]}\nwatchdog: {device: /dev/watchdog0}\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Config: cfg, Client: fake.NewClientset(), NodeName: "node-a", BootID: "boot-1"}
	if d := newNodeWatchdog(o, nil, nil, nil, prometheus.NewRegistry(), slog.Default()); d != nil {
		t.Fatal("a watchdog for a node without the level")
	}
	// An observer's configuration — no topology, no power device — arms
	// the device it names.
	observer, err := config.Parse([]byte("apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\nwatchdog: {device: /dev/watchdog0}\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o.Config = observer
	if d := newNodeWatchdog(o, nil, nil, nil, prometheus.NewRegistry(), slog.Default()); d == nil {
		t.Fatal("an observer whose configuration names a watchdog device arms nothing")
	}
}

// TestAgentWatchdogResetsThroughASocketWatchdog: the agent's watchdog
// loop, its device opened by openDevice at a "unix:" path, against the
// test bed's emulated watchdog: armed once a read found no order and kept
// petted; a fence order for this boot stops the pets, and the watchdog
// fires — the machine resets — its timeout after the last pet.
func TestAgentWatchdogResetsThroughASocketWatchdog(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "wd.sock")
	var fired atomic.Int64
	emu, err := wdemu.Start(sock, func() { fired.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emu.Close() })
	cfg, err := config.Parse([]byte("apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\ntopology: {defaults: [[watchdog]]}\n"+
		"watchdog: {device: \"unix:"+sock+"\", timeout: 2s, confirm: 5s}\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	key, _ := identity.NewKey()
	if err := publish.Publish(t.Context(), client, dogNS, "node-a", "boot-1", key.Public(), time.Now()); err != nil {
		t.Fatal(err)
	}
	published := make(chan struct{})
	close(published)
	logs := &lockedBuffer{}
	d := newNodeWatchdog(Options{Config: cfg, Client: client, NodeName: "node-a", BootID: "boot-1"}, key, published, openDevice,
		prometheus.NewRegistry(), slog.New(slog.NewTextHandler(logs, nil)))
	d.petter.ReadEvery = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	poll.Until(t, 10*time.Second, "the emulated watchdog armed", func() bool { armed, _ := emu.Armed(); return armed })
	time.Sleep(3 * time.Second) // longer than its timeout, petted all along (every 400 ms)
	if fired.Load() != 0 {
		t.Fatalf("fired while the agent petted it: %s", logs.String())
	}
	if err := publish.WriteOrder(t.Context(), client, dogNS, "node-a", "boot-1", "cp-1"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the machine reset by its watchdog", func() bool { return fired.Load() == 1 })
}
