package fencing

import "time"

// The fencer's defaults, each with its reason. New applies them to a
// Config field left zero, except MonitorInterval, whose zero disables the
// device checks: a Config built by hand (tests) checks no devices unless
// it asks, and the agent sets DefaultMonitorInterval when the
// configuration file leaves fencer.monitorInterval unset. pkg/config
// cannot name them (this package imports it through pkg/fencing/device):
// its loader leaves unset what the file does not set.
const (
	// DefaultLeaseDuration: a fencer that dies mid-action loses its Lease
	// within this time, and another fencer takes over.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultMonitorInterval: every fencer checks every power device every
	// 5 minutes (±10 %), 12 sessions per device and fencer per hour — a
	// broken password or a dead PDU is found within minutes, at a cost no
	// BMC notices (Pacemaker's stonith monitor default is 60 s).
	DefaultMonitorInterval = 5 * time.Minute
	// DefaultMaxConcurrentPowerReads bounds the power reads one fencer has
	// in flight at once. A rack that goes dark makes forty nodes suspect in
	// the same second; unbounded, that is forty BMC sessions — or forty
	// fence agent processes (a Python interpreter each) for a PDU level.
	// Sixteen reads a 40-node rack whose BMCs answer in three waves of
	// milliseconds; a dark BMC holds a slot for NextLevelAfter when a
	// next level answers, for its whole timeout (bmc.timeout × (1 +
	// bmc.retries)) when none does, which is what a larger bound buys.
	DefaultMaxConcurrentPowerReads = 16
	// DefaultWorkers carry out the decisions of that many nodes at once.
	// A fence is a handful of API round trips (the kubelet's Lease, the
	// Node, the taint, Ready, the pods): one worker, at ~100 ms a round
	// trip on a busy API server, left the last of a 40-node rack tainted
	// seconds after its power read off, and four still queued the rack's
	// fences behind each other. As many workers as power reads may be in
	// flight (DefaultMaxConcurrentPowerReads) carry out a rack's fences
	// as fast as its reads come in. The decisions stay one at a time
	// (Fencer.decideMu): only the writes run side by side.
	DefaultWorkers = DefaultMaxConcurrentPowerReads
	// DefaultChallengeTimeout: an agent that does not answer a liveness
	// challenge within this is silent. Answers take milliseconds.
	DefaultChallengeTimeout = 2 * time.Second
	// NextLevelAfter is how long a power read waits for a fencing level
	// before it reads the next level beside it (readLevels): a healthy
	// BMC answers within milliseconds, a busy one within a second; a dark
	// one would keep the read for its whole timeout.
	NextLevelAfter = time.Second
	// DefaultKubeletLeaseReadTimeout: before each power request the
	// fencer reads the node's kubelet Lease from the API server (the
	// renewal a later sign of life must beat); an API server that does not
	// answer within this must not delay the reading.
	DefaultKubeletLeaseReadTimeout = 2 * time.Second
)
