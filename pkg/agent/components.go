package agent

import "log/slog"

// component names a part of the agent in its log: every line carries it
// as the attribute "component", so that a log pipeline can select one
// part's lines (the fencer's decisions, the ring's suspicions) without
// knowing their messages. client-go's lines are "client-go" (cmd/fenced
// routes klog into the same log).
type component string

const (
	componentAgent    component = "agent"    // start, supervision, own key, the kubelet's graceful shutdown
	componentRing     component = "ring"     // the gossip ring (pkg/heartbeat), memberlist's lines included
	componentFencer   component = "fencer"   // decisions and actions (pkg/fencing)
	componentStale    component = "stale"    // the stale VolumeAttachment report (pkg/stale)
	componentShutdown component = "shutdown" // clean-shutdown announcements (pkg/shutdown)
	componentDevice   component = "device"   // power devices and their drivers (pkg/fencing/device)
	componentWatchdog component = "watchdog" // this node's watchdog: armed, petted, its statement (pkg/watchdog)
)

// componentLog is log for component c; nil log: slog's default.
func componentLog(log *slog.Logger, c component) *slog.Logger {
	if log == nil {
		log = slog.Default()
	}
	return log.With("component", string(c))
}
