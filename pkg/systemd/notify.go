// Package systemd speaks the sd_notify protocol, so that fenced runs as a
// Type=notify unit: READY once started, STATUS lines, WATCHDOG keep-alives
// (RunWatchdog, for WatchdogSec=), STOPPING on exit. Outside systemd (no
// NOTIFY_SOCKET, no WATCHDOG_USEC) every call is a no-op.
package systemd

import (
	"github.com/coreos/go-systemd/v22/daemon"
)

// Notify sends one or more sd_notify assignments (e.g. daemon.SdNotifyReady).
// It reports whether a notification socket was there to receive them.
func Notify(states ...string) (bool, error) {
	sent := false
	for _, s := range states {
		ok, err := daemon.SdNotify(false, s)
		if err != nil {
			return sent, err
		}
		sent = sent || ok
	}
	return sent, nil
}

// Re-exported states, so callers need not import go-systemd themselves.
const (
	Ready    = daemon.SdNotifyReady
	Stopping = daemon.SdNotifyStopping
)

// Status formats a STATUS= line: the one-line summary `systemctl status` shows.
func Status(s string) string { return "STATUS=" + s }
