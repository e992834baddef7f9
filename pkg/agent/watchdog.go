package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/watchdog"
)

// The node's watchdog, when its levels end in the watchdog level
// (docs/design.md §10): the agent arms it, pets it only while a read of the
// API confirms there is no fence order for its boot (watchdog.Petter), and
// says so, signed with this run's key, on its key Lease — only once the
// watchdog is armed and the key published. It disarms only for a clean
// shutdown it announced. Stopped for any other reason it leaves the
// watchdog armed: an agent that dies cannot keep its machine up, and the
// next run of the same boot opens the device again, once a read of its own
// found no order.

// openedDevice is an open watchdog device and what it said of itself.
type openedDevice struct {
	watchdog.Pettable
	// Identity, Timeout and Software as watchdog.Device has them.
	Identity string
	Timeout  time.Duration
	Software bool
}

// openDevice opens the watchdog at path: a Linux watchdog device
// (watchdog.Open), or a watchdog outside the machine behind a unix socket
// ("unix:/…", watchdog.OpenSocket: the test harness's machines).
func openDevice(path string, timeout time.Duration) (openedDevice, error) {
	if watchdog.IsSocket(path) {
		s, err := watchdog.OpenSocket(path, timeout)
		if err != nil {
			return openedDevice{}, err
		}
		return openedDevice{Pettable: s, Identity: s.Identity, Timeout: s.Timeout, Software: s.Software}, nil
	}
	d, err := watchdog.Open(path, timeout)
	if err != nil {
		return openedDevice{}, err
	}
	return openedDevice{Pettable: d, Identity: d.Identity, Timeout: d.Timeout, Software: d.Software}, nil
}

// nodeWatchdog is this node's watchdog loop and its statement.
type nodeWatchdog struct {
	client         kubernetes.Interface
	ns, node, boot string
	key            *identity.Key
	// published is closed once this run's key is on the Lease (ownKey).
	published <-chan struct{}
	confirm   time.Duration
	petter    *watchdog.Petter
	log       *slog.Logger
	armedG    prometheus.Gauge

	mu sync.Mutex
	// armed is what the opened device said of itself.
	armed *identity.Armed

	// stateMu orders the statement's publication and its withdrawal: a
	// statement written after the disarm would tell fencers of a watchdog
	// that no longer counts down. disarmed is set, under it, by disarm.
	stateMu  sync.Mutex
	disarmed bool
	// armedNow is signalled when the device is opened.
	armedNow chan struct{}
}

// newNodeWatchdog builds the watchdog of node, nil when its configuration
// does not arm one (config.ArmsWatchdog: its agent arms nothing). open opens
// the device (openDevice).
func newNodeWatchdog(o Options, key *identity.Key, published <-chan struct{}, open func(string, time.Duration) (openedDevice, error),
	reg prometheus.Registerer, log *slog.Logger) *nodeWatchdog {
	w := o.Config.Watchdog
	if !o.Config.ArmsWatchdog(o.NodeName) {
		return nil
	}
	d := &nodeWatchdog{client: o.Client, ns: o.Config.Fencer.LeaseNamespace, node: o.NodeName, boot: o.BootID, key: key,
		published: published, confirm: w.Confirm, log: log, armedNow: make(chan struct{}, 1),
		armedG: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenced_watchdog_armed",
			Help: "1 while this node's watchdog is armed and its armed statement is on its key Lease (its watchdog level can fence it); 0 otherwise.",
		})}
	reg.MustRegister(d.armedG)
	d.petter = &watchdog.Petter{
		Confirm:   w.Confirm,
		ReadEvery: w.Confirm / 3,
		PetEvery:  petEvery(w.Timeout),
		Orders:    orders{client: o.Client, ns: d.ns, node: d.node, boot: d.boot},
		Log:       log,
		Open:      func() (watchdog.Pettable, error) { return d.open(open, w) },
		// Called under the Petter's lock: never blocks.
		Armed: func(watchdog.Pettable) {
			select {
			case d.armedNow <- struct{}{}:
			default:
			}
		},
	}
	return d
}

// petEvery is how often the watchdog is petted while allowed: five times
// in its timeout, at most every 2 s, at least every 100 ms.
func petEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/5, 100*time.Millisecond), 2*time.Second)
}

// open opens the device and checks it: a software watchdog is disarmed
// again and refused unless the section allows it.
func (d *nodeWatchdog) open(open func(string, time.Duration) (openedDevice, error), w config.Watchdog) (watchdog.Pettable, error) {
	dev, err := open(w.Device, w.Timeout)
	if err != nil {
		return nil, err
	}
	if dev.Software && !w.AllowSoftware {
		err := dev.Disarm()
		return nil, fmt.Errorf("watchdog %s is a software watchdog (%s), a kernel timer that a hung kernel never runs: refused (watchdog.allowSoftware: true accepts it, named as weaker); disarming it: %v",
			w.Device, dev.Identity, err)
	}
	d.mu.Lock()
	d.armed = &identity.Armed{Timeout: dev.Timeout, Confirm: d.confirm, Device: dev.Identity, Software: dev.Software}
	d.mu.Unlock()
	d.log.Info("watchdog armed", "device", w.Device, "identity", dev.Identity, "timeout", dev.Timeout, "confirm", d.confirm, "software", dev.Software)
	return dev, nil
}

// run runs the petting loop until ctx ends or an order for this boot is
// read, and states the watchdog armed once it is and the key is published.
func (d *nodeWatchdog) run(ctx context.Context) {
	done := make(chan error, 1)
	go func() { done <- d.petter.Run(ctx) }()
	for {
		select {
		case err := <-done:
			if errors.Is(err, watchdog.ErrOrdered) {
				d.log.Error("a fence order for this boot exists: the watchdog is no longer petted and resets this machine", "boot", d.boot)
			}
			<-ctx.Done()
			return
		case <-d.armedNow:
			d.state(ctx)
		case <-ctx.Done():
			<-done
			return
		}
	}
}

// state publishes the armed statement once the key is published.
func (d *nodeWatchdog) state(ctx context.Context) {
	select {
	case <-d.published:
	case <-ctx.Done():
		return
	}
	d.mu.Lock()
	a := *d.armed
	d.mu.Unlock()
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		stated, err := d.publishArmed(ctx, a)
		if stated || err == nil {
			return
		}
		d.log.Warn("cannot state the armed watchdog on this node's key Lease yet: fencers cannot fence this node on its watchdog until then", "err", err, "retryIn", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
	}
}

// publishArmed writes the statement a unless the watchdog was disarmed;
// stated reports whether it did.
func (d *nodeWatchdog) publishArmed(ctx context.Context, a identity.Armed) (stated bool, err error) {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	if d.disarmed {
		return false, nil
	}
	if err := publish.PublishArmed(ctx, d.client, d.ns, d.node, d.boot, d.key, a); err != nil {
		return false, err
	}
	d.armedG.Set(1)
	d.log.Info("stated the armed watchdog on this node's key Lease, signed with this run's key", "timeout", a.Timeout, "confirm", a.Confirm, "device", a.Device)
	return true, nil
}

// disarm stops the watchdog (the magic close) and withdraws the statement:
// for a clean shutdown, once it has been announced.
func (d *nodeWatchdog) disarm(ctx context.Context) {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	d.disarmed = true
	d.armedG.Set(0)
	if err := d.petter.Disarm(); err != nil {
		d.log.Warn("disarming the watchdog after the clean-shutdown announcement", "err", err)
	} else {
		d.log.Info("watchdog disarmed: this node announced a clean shutdown")
	}
	if err := publish.WithdrawArmed(ctx, d.client, d.ns, d.node); err != nil {
		d.log.Warn("withdrawing the armed statement", "err", err)
	}
}

// orders reads this node's fence order from the API server.
type orders struct {
	client         kubernetes.Interface
	ns, node, boot string
}

// Ordered reports whether a fence order for this boot exists, by a read
// of the API server (publish.ReadOrder: a quorum read). An order for
// another boot is an earlier boot's, not yet withdrawn.
func (o orders) Ordered(ctx context.Context) (bool, error) {
	ord, found, err := publish.ReadOrder(ctx, o.client, o.ns, o.node)
	if err != nil {
		return false, err
	}
	return found && ord.BootID == o.boot, nil
}
