package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/metrics"
	"fenced.io/fenced/pkg/shutdown"
	"fenced.io/fenced/pkg/vocab"
)

// gracefulCheckInterval is how often the agent asks logind again whether
// the kubelet holds its shutdown delay lock. It polls rather than watches
// because there is nothing to watch: the kubelet's configuration is not in
// the API server, and logind hands out its inhibitor list only as a method
// call (ListInhibitors). Asking again matters: the kubelet may start after
// the agent, restart, or be reconfigured. One D-Bus call every few minutes
// costs nothing, and the answer is advice for `fenced diagnose --all`, on
// which no decision rests, so minutes of lag cost nothing either.
const gracefulCheckInterval = 5 * time.Minute

// gracefulPublishRetry is how soon a failed write of the answer on the
// agent's Lease is tried again (the Lease exists only once the key is
// published).
const gracefulPublishRetry = 30 * time.Second

// gracefulWatch checks the kubelet's graceful node shutdown at start and
// every interval, and publishes what it found: a log line and the gauge
// when it changes, and the annotation on the agent's own Lease.
type gracefulWatch struct {
	probe   func() shutdown.GracefulCheck
	publish func(context.Context, vocab.GracefulShutdown) error
	gauge   prometheus.Gauge
	log     *slog.Logger
	// interval and retry: gracefulCheckInterval, gracefulPublishRetry.
	interval, retry time.Duration
}

// newGracefulWatch registers fenced_kubelet_graceful_shutdown (-1 until
// the first check) and returns the watch of p's node.
func (p *parts) newGracefulWatch() *gracefulWatch {
	o := p.o
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: metrics.KubeletGracefulShutdownMetric,
		Help: "1 when this node's kubelet holds its logind shutdown delay lock (graceful node shutdown, shutdownGracePeriod, is configured), 0 when logind lists no such lock, -1 when logind cannot be asked.",
	})
	g.Set(-1)
	p.reg.MustRegister(g)
	return &gracefulWatch{
		probe: func() shutdown.GracefulCheck { return shutdown.ProbeGraceful(o.DialLogind) },
		publish: func(ctx context.Context, s vocab.GracefulShutdown) error {
			return publish.PublishGracefulShutdown(ctx, o.Client, o.Config.Fencer.LeaseNamespace, o.NodeName, s)
		},
		gauge: g, log: p.log, interval: gracefulCheckInterval, retry: gracefulPublishRetry,
	}
}

// run checks and publishes until ctx ends.
func (w *gracefulWatch) run(ctx context.Context) {
	var seen, published vocab.GracefulShutdown
	failing := false
	for {
		c := w.probe()
		if c.State != seen {
			seen = c.State
			w.report(c)
		}
		wait := w.interval
		if published != seen {
			if err := w.publish(ctx, seen); err != nil {
				if ctx.Err() != nil {
					return
				}
				// Once per state: retried every w.retry.
				if !failing {
					w.log.Warn("cannot publish the kubelet's graceful shutdown on this agent's Lease; retrying", "gracefulShutdown", seen, "err", err)
				}
				failing, wait = true, w.retry
			} else {
				published, failing = seen, false
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// report sets the gauge and logs the new state, once per change.
func (w *gracefulWatch) report(c shutdown.GracefulCheck) {
	switch c.State {
	case vocab.GracefulKubeletDelayLock:
		w.gauge.Set(1)
		w.log.Info("the kubelet has graceful node shutdown: it holds a logind shutdown delay lock", "gracefulShutdown", c.State,
			"lock", c.Lock.Why, "pid", c.Lock.PID, "inhibitDelayMax", c.InhibitDelayMax)
	case vocab.GracefulNone:
		w.gauge.Set(0)
		w.log.Warn("the kubelet holds no logind shutdown delay lock: no graceful node shutdown (shutdownGracePeriod), so a clean shutdown leaves its pods and VolumeAttachments behind",
			"gracefulShutdown", c.State, "inhibitDelayMax", c.InhibitDelayMax)
	default:
		w.gauge.Set(-1)
		w.log.Info("cannot tell whether the kubelet has graceful node shutdown: logind cannot be asked", "gracefulShutdown", c.State, "err", c.Err)
	}
}
