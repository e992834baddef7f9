// Package vocab is the vocabulary fenced's packages share: what gossip
// says of a member, what an agent announces about its own host, the kinds
// of evidence a taint may rest on, what a power device reads and why it
// failed (power.go), the modes fencing runs in (mode.go), and every Event
// reason fenced records (events.go). Each word is defined here once, as a
// type, so that a typo does not compile and no package compares a bare
// string (TestNoBareVocabulary) or records an Event with a reason of its
// own (TestEventCatalogue). It imports nothing, so that the decision core
// (pkg/fencing/core) may use it and stay pure.
package vocab

// MemberState is a gossip ring member's state as an agent sees it.
type MemberState string

// Member states.
const (
	MemberAlive   MemberState = "alive"
	MemberSuspect MemberState = "suspect"
	MemberDead    MemberState = "dead"
	MemberLeft    MemberState = "left"
)

// Gone reports whether the ring says the member is gone: dead or left.
func (s MemberState) Gone() bool { return s == MemberDead || s == MemberLeft }

// Announcement is the state an agent announces about its own host.
type Announcement string

// Announcements.
const (
	// AnnounceRunning is the normal state of a host.
	AnnounceRunning Announcement = "running"
	// AnnounceShuttingDown: the host has begun shutting down; its volumes
	// may still be mounted.
	AnnounceShuttingDown Announcement = "shutting-down"
	// AnnounceShutdownComplete: the host's shutdown has passed the point
	// where no CSI volume is mounted any more. Signed by the agent's own
	// key and followed by its signed leave, it is clean-shutdown evidence.
	AnnounceShutdownComplete Announcement = "shutdown-complete"
	// AnnounceRestarting: the agent is stopping while its host runs on —
	// a DaemonSet rollout, a configuration change, `systemctl restart` —
	// and expects to be back. Signed by the agent's own key and followed
	// by its signed leave, it keeps fencers from reading the power of a
	// node whose kubelet is still Ready (policy.restartWait bounds it). It
	// is no evidence of anything: it can only delay a suspicion.
	AnnounceRestarting Announcement = "restarting"
)

// Valid reports whether a is one of the announcements.
func (a Announcement) Valid() bool {
	switch a {
	case AnnounceRunning, AnnounceShuttingDown, AnnounceShutdownComplete, AnnounceRestarting:
		return true
	}
	return false
}

// Shutdown reports whether a announces a shutdown (begun or past the
// volumes).
func (a Announcement) Shutdown() bool {
	return a == AnnounceShuttingDown || a == AnnounceShutdownComplete
}

// Leaving reports whether a announces that the agent is about to leave
// the gossip ring on purpose: a shutdown, or its own restart.
func (a Announcement) Leaving() bool {
	return a.Shutdown() || a == AnnounceRestarting
}

// GracefulShutdown is what an agent found of its kubelet's graceful node
// shutdown (shutdownGracePeriod): the kubelet's configuration is not in the
// API, but with graceful shutdown on the kubelet holds a logind shutdown
// delay lock, which the agent can list (pkg/shutdown.CheckGraceful). It is
// published on the agent's own Lease (pkg/identity/publish) and read by
// `fenced diagnose --all`. Advice only: no safety decision rests on it.
type GracefulShutdown string

// What an agent found of its kubelet's graceful node shutdown.
const (
	// GracefulKubeletDelayLock: logind lists the kubelet's shutdown delay
	// lock, so the kubelet has a shutdown grace period.
	GracefulKubeletDelayLock GracefulShutdown = "kubelet-delay-lock"
	// GracefulNone: logind answered and lists no such lock: the kubelet has
	// no graceful node shutdown (or is not running, or is in the middle of
	// a shutdown, when it has released its lock).
	GracefulNone GracefulShutdown = "none"
	// GracefulUnknown: the agent could not ask logind (no system bus, no
	// logind, an error).
	GracefulUnknown GracefulShutdown = "unknown"
)

// Valid reports whether g is one of the GracefulShutdown words.
func (g GracefulShutdown) Valid() bool {
	switch g {
	case GracefulKubeletDelayLock, GracefulNone, GracefulUnknown:
		return true
	}
	return false
}

// EvidenceMethod is the kind of evidence a taint rests on (docs/design.md §2).
// There is deliberately no fifth: anything else is a suspicion.
type EvidenceMethod string

// Evidence methods.
const (
	// EvidenceBMCPowerOff: an authenticated read of the node's power
	// device, taken after the node stopped answering, says it is off.
	EvidenceBMCPowerOff EvidenceMethod = "bmc-power-off"
	// EvidenceCleanShutdown: the node announced, signed with its own key,
	// that its shutdown got past the point where no CSI volume is mounted,
	// and left the ring.
	EvidenceCleanShutdown EvidenceMethod = "clean-shutdown"
	// EvidenceManual: an operator ran `fenced confirm` (identity and
	// reason recorded) and fenced did not read the power as on.
	EvidenceManual EvidenceMethod = "manual"
	// EvidenceWatchdog: the node stated, signed with its own key for its
	// boot, that it armed a hardware watchdog it pets only while no fence
	// order for that boot exists; a fencer wrote one, and the node gave no
	// sign of life while the wait that bounds its reset passed
	// (docs/design.md §10).
	EvidenceWatchdog EvidenceMethod = "watchdog"
)

// Valid reports whether m is one of the evidence methods.
func (m EvidenceMethod) Valid() bool {
	switch m {
	case EvidenceBMCPowerOff, EvidenceCleanShutdown, EvidenceManual, EvidenceWatchdog:
		return true
	}
	return false
}

// DeviceBMC is the power device name that means a node's own BMC, from the
// configuration's bmc section: in a fencing level, and in the readings and
// evidence that come from one.
const DeviceBMC = "bmc"

// DeviceWatchdog is the device name of a fencing level that means the
// node's own watchdog (docs/design.md §10): no power device is read; the
// node is ordered to let its watchdog reset it, and the wait that bounds
// the reset is the evidence.
const DeviceWatchdog = "watchdog"

// WatchdogSocketPrefix marks a watchdog device path that names a watchdog
// outside the machine behind a unix socket: "unix:" and the socket's
// absolute path (pkg/watchdog's socket protocol).
const WatchdogSocketPrefix = "unix:"
