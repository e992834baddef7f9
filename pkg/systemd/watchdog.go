package systemd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Watchdog is the WATCHDOG=1 keep-alive of a unit with WatchdogSec=.
const Watchdog = daemon.SdNotifyWatchdog

// WatchdogInterval returns the unit's WatchdogSec= as systemd passed it
// (WATCHDOG_USEC), or 0 when no watchdog watches this process: not under
// systemd, no WatchdogSec=, or WATCHDOG_PID names another process (a child
// that inherited the environment must not ping on its parent's behalf).
func WatchdogInterval() (time.Duration, error) {
	return daemon.SdWatchdogEnabled(false)
}

// RunWatchdog keeps systemd's watchdog fed until ctx ends: it sends
// WATCHDOG=1 at once and then every half of WatchdogSec= — the margin
// sd_watchdog_enabled(3) recommends, so that one late tick is not a restart.
// Without a watchdog (WatchdogInterval is 0) it returns nil at once, so it
// can be started unconditionally.
//
// healthy, when not nil, is asked before every ping, and a failing check
// sends nothing: if it keeps failing for WatchdogSec=, systemd kills and
// restarts the service. A goroutine that pings unconditionally only proves
// that the Go scheduler runs, so healthy should test that the agent's own
// loops make progress. It should not test outside conditions (API server,
// peers): a restart cures a deadlock, not a network fault, and restarting a
// fencer throws away what it knows.
//
// It returns nil when ctx ends, and an error when WATCHDOG_USEC is malformed
// or a ping cannot be sent (no NOTIFY_SOCKET, or the socket refuses it):
// systemd will then restart the service when WatchdogSec= runs out, and the
// error tells the log why.
func RunWatchdog(ctx context.Context, healthy func() error) error {
	interval, err := WatchdogInterval()
	if err != nil {
		return fmt.Errorf("systemd watchdog: %w", err)
	}
	if interval <= 0 || ctx.Err() != nil {
		return nil
	}
	tick := time.NewTicker(interval / 2)
	defer tick.Stop()
	for {
		if healthy == nil || healthy() == nil {
			sent, err := daemon.SdNotify(false, Watchdog)
			if err != nil {
				return fmt.Errorf("systemd watchdog: sending %s: %w", Watchdog, err)
			}
			if !sent {
				return errors.New("systemd watchdog: WATCHDOG_USEC is set but NOTIFY_SOCKET is not: cannot reach systemd")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
