// Package shutdown lets a host tell the fencers that it is shutting down
// cleanly, so that they can taint it without asking its BMC.
//
// The agent holds a logind *delay* inhibitor lock for shutdown, as the
// kubelet's graceful node shutdown does. When logind announces a shutdown
// (PrepareForShutdown), the Watcher announces "shutting-down" over gossip,
// waits until the host has no CSI volume mounted any more — the kubelet
// unmounts them after it stopped the pods — and only then announces
// "shutdown-complete" and leaves the ring; then it releases its lock and
// lets the shutdown go on. Fencers take "announced shutdown-complete for
// the node's current boot, then left" as clean-shutdown evidence. If
// mounts remain when the time logind grants runs out, the Watcher leaves
// without that announcement, and fencers wait for the BMC as for any
// other silent node.
package shutdown

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/vocab"
)

// Ring is the part of the gossip ring the Watcher uses
// (*heartbeat.Ring).
type Ring interface {
	Announce(state vocab.Announcement) error
	Leave(timeout time.Duration) error
}

// Mounts tells which CSI volumes are mounted on this host (MountTable).
type Mounts interface {
	CSIMounts() ([]string, error)
	// WaitChange returns when the mounts may have changed, after at most
	// timeout, or when ctx ends.
	WaitChange(ctx context.Context, timeout time.Duration) error
}

// Defaults of Config.
const (
	// DefaultLeaveTimeout bounds leaving the ring at shutdown; the time
	// left of logind's delay after the wait for unmounts.
	DefaultLeaveTimeout = heartbeat.DefaultLeaveTimeout
	// DefaultRetryInterval is the pause between attempts to reach logind.
	DefaultRetryInterval = 30 * time.Second
	// shortDelay: below this InhibitDelayMaxSec the kubelet cannot have
	// stopped pods and unmounted volumes (logind's own default is 5s).
	shortDelay = 10 * time.Second
)

// ErrCancelledAfterLeave is returned by Run when logind cancels a shutdown
// after the agent already left the ring: the agent should exit and be
// restarted, to join again.
var ErrCancelledAfterLeave = errors.New("the host's shutdown was cancelled after this agent had left the gossip ring; exiting so that it is restarted and joins again")

// Config configures a Watcher.
type Config struct {
	// Dial connects to logind (DialLogind).
	Dial func() (Logind, error)
	Ring Ring
	// Mounts is this host's mount table (MountTable).
	Mounts Mounts
	// LeaveTimeout bounds leaving the ring (DefaultLeaveTimeout); it is
	// cut to half of logind's delay when that is shorter.
	LeaveTimeout time.Duration
	// RetryInterval is the pause between attempts to reach logind
	// (DefaultRetryInterval).
	RetryInterval time.Duration
	// OnLock, if set, is told when the shutdown delay lock is taken and
	// released (for a metric: without the lock there is no announcement).
	OnLock func(held bool)
	Logger *slog.Logger
}

// Result is how the Watcher handled a shutdown of the host.
type Result struct {
	// Complete: no CSI volume was mounted any more, and the agent
	// announced shutdown-complete before leaving.
	Complete bool
	// Mounts are the CSI mounts left when the Watcher gave up waiting.
	Mounts []string
	// Waited is the time from PrepareForShutdown to the announcement.
	Waited time.Duration
}

// Watcher follows logind's shutdown signals for the agent.
type Watcher struct {
	c       Config
	log     *slog.Logger
	leaving chan struct{}
	left    chan struct{}

	mu     sync.Mutex
	result Result
	// stoppedWithHostRunning: Run ended (the agent is stopped) while the
	// Watcher held its lock and no shutdown was under way.
	stoppedWithHostRunning bool
}

// New returns a Watcher; Run runs it.
func New(c Config) *Watcher {
	if c.LeaveTimeout <= 0 {
		c.LeaveTimeout = DefaultLeaveTimeout
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Watcher{c: c, log: c.Logger, leaving: make(chan struct{}), left: make(chan struct{})}
}

// Leaving is closed right before the Watcher leaves the ring because the
// host shuts down: from then on the ring's end is expected.
func (w *Watcher) Leaving() <-chan struct{} { return w.leaving }

// Left is closed once the Watcher left the ring because the host shuts
// down; Result then tells how.
func (w *Watcher) Left() <-chan struct{} { return w.left }

// Result returns the outcome of the host's shutdown, once Left is closed.
func (w *Watcher) Result() Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.result
}

// StoppedWithHostRunning reports, once Run has returned, whether the
// agent was stopped while its host runs on: Run ended holding its shutdown
// delay lock with no shutdown under way. With the lock held, logind tells
// the Watcher of a shutdown before the service manager may stop anything,
// so the stop is not the host's: a rollout, a restart, or a stop for good.
// Without the lock (logind unreachable) it cannot be told: false.
func (w *Watcher) StoppedWithHostRunning() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stoppedWithHostRunning
}

// Run holds a shutdown delay lock and handles a shutdown when logind
// announces one, until ctx ends. While logind is unreachable it retries
// and says so: the agent works on without clean-shutdown announcements,
// and fencers rely on the BMC. After a shutdown was handled, Run waits
// for ctx (the service manager stops the agent next) and returns
// ErrCancelledAfterLeave if logind cancels the shutdown instead.
func (w *Watcher) Run(ctx context.Context) error {
	warned := false
	for {
		l, err := w.c.Dial()
		if err == nil {
			warned = false
			var done bool
			done, err = w.session(ctx, l)
			_ = l.Close()
			if done || ctx.Err() != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if !warned {
			w.log.Warn("clean-shutdown announcements are off until logind is reachable: fencers will need the BMC to confirm this node off",
				"err", err, "retry", w.c.RetryInterval)
			warned = true
		} else {
			w.log.Debug("logind still unreachable", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.c.RetryInterval):
		}
	}
}

// session runs on one logind connection. done means Run is over (with
// err); otherwise err says why the connection is no longer usable.
func (w *Watcher) session(ctx context.Context, l Logind) (done bool, err error) {
	delay, err := l.InhibitDelayMax()
	if err != nil {
		return false, err
	}
	lock, err := l.InhibitShutdown("fenced", "announce a clean shutdown to the fencers once no CSI volume is mounted")
	if err != nil {
		return false, err
	}
	w.lockHeld(true)
	release := func() {
		if lock != nil {
			_ = lock.Close()
			lock = nil
			w.lockHeld(false)
		}
	}
	defer release()
	wait, leave := w.budget(delay)
	w.log.Info("holding a logind shutdown delay lock", "inhibitDelayMax", delay, "waitForUnmounts", wait, "leaveTimeout", leave)
	if delay < shortDelay {
		w.log.Warn("logind's InhibitDelayMaxSec is too short for the kubelet to stop pods and unmount volumes before shutdown: set the kubelet's shutdownGracePeriod (the kubelet raises InhibitDelayMaxSec to it)",
			"inhibitDelayMax", delay)
	}
	signals := l.PrepareForShutdown()
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			w.stoppedWithHostRunning = true
			w.mu.Unlock()
			return true, nil
		case starting, ok := <-signals:
			if !ok {
				return false, errors.New("lost the connection to logind")
			}
			if !starting {
				w.log.Info("logind: a shutdown was cancelled; still holding the lock")
				continue
			}
			if d, err := l.InhibitDelayMax(); err == nil && d != delay {
				delay = d
				wait, leave = w.budget(delay)
			}
			cancelled, err := w.shutdown(ctx, signals, wait, leave, release)
			if err != nil || !cancelled {
				return true, err
			}
			// Cancelled before leaving: the lock is still held; carry on.
		}
	}
}

func (w *Watcher) lockHeld(held bool) {
	if w.c.OnLock != nil {
		w.c.OnLock(held)
	}
}

// budget splits logind's delay into the wait for unmounts and the leave.
func (w *Watcher) budget(delay time.Duration) (wait, leave time.Duration) {
	leave = min(w.c.LeaveTimeout, delay/2)
	// A little slack for the announcement and the release itself.
	wait = max(delay-leave-delay/10, 0)
	return wait, leave
}

// shutdown handles one PrepareForShutdown(true). cancelled reports a
// cancellation before the agent left the ring (it is back to running).
func (w *Watcher) shutdown(ctx context.Context, signals <-chan bool, wait, leave time.Duration, release func()) (cancelled bool, err error) {
	start := time.Now()
	w.log.Info("the host is shutting down (logind PrepareForShutdown): announcing shutting-down and waiting for the CSI volumes to be unmounted",
		"waitAtMost", wait)
	if err := w.c.Ring.Announce(vocab.AnnounceShuttingDown); err != nil {
		w.log.Warn("announcing shutting-down", "err", err)
	}

	deadline := start.Add(wait)
	var mounts []string
	var readErr error
	stopping := false // the service manager stopped us mid-wait
	for {
		mounts, readErr = w.c.Mounts.CSIMounts()
		if readErr == nil && len(mounts) == 0 {
			break
		}
		if stopping || !time.Now().Before(deadline) {
			break
		}
		select {
		case starting, ok := <-signals:
			if ok && !starting {
				w.log.Info("logind: the shutdown was cancelled; announcing running again")
				if err := w.c.Ring.Announce(vocab.AnnounceRunning); err != nil {
					w.log.Warn("announcing running", "err", err)
				}
				return true, nil
			}
		case <-ctx.Done():
			// Stopped before the wait was over: one last look, then go.
			stopping = true
			continue
		default:
		}
		if err := w.c.Mounts.WaitChange(ctx, min(time.Until(deadline), time.Second)); err != nil && ctx.Err() == nil {
			// An unreadable table cannot be waited on: look again shortly.
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}

	res := Result{Waited: time.Since(start)}
	switch {
	case readErr != nil:
		w.log.Warn("cannot read the mount table: not announcing shutdown-complete; fencers will need the BMC to confirm this node off",
			"err", readErr, "waited", res.Waited.Round(time.Millisecond))
	case len(mounts) > 0:
		res.Mounts = mounts
		w.log.Warn("CSI volumes still mounted: not announcing shutdown-complete; fencers will need the BMC to confirm this node off",
			"mounts", strings.Join(mounts, ","), "waited", res.Waited.Round(time.Millisecond))
	default:
		if err := w.c.Ring.Announce(vocab.AnnounceShutdownComplete); err != nil {
			// The new state still spreads; a fencer that misses it before
			// the leave sees a plain leave and asks the BMC.
			w.log.Warn("announcing shutdown-complete", "err", err)
		}
		res.Complete = true
		w.log.Info("no CSI volume mounted any more: announced shutdown-complete", "waited", res.Waited.Round(time.Millisecond))
	}
	// The result is in place before anything below lets the host go on.
	w.mu.Lock()
	w.result = res
	w.mu.Unlock()
	close(w.leaving)
	if err := w.c.Ring.Leave(leave); err != nil {
		w.log.Warn("leaving the gossip ring", "err", err)
	}
	// Logged before the release: once the last lock goes, the host may
	// stop this process at any moment.
	w.log.Info("left the gossip ring; releasing the shutdown lock so that the shutdown goes on")
	release()
	close(w.left)

	for {
		select {
		case <-ctx.Done():
			return false, nil
		case starting, ok := <-signals:
			if !ok {
				// logind is going away with the host: nothing more to hear.
				<-ctx.Done()
				return false, nil
			}
			if !starting {
				return false, ErrCancelledAfterLeave
			}
		}
	}
}

// String describes a Result for logs and status lines.
func (r Result) String() string {
	if r.Complete {
		return fmt.Sprintf("announced shutdown-complete after %s", r.Waited.Round(time.Millisecond))
	}
	return fmt.Sprintf("left without shutdown-complete after %s (%d CSI mounts left)", r.Waited.Round(time.Millisecond), len(r.Mounts))
}
