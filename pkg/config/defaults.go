package config

import (
	"time"

	"fenced.io/fenced/pkg/heartbeat"
)

// The defaults of the configuration file that no package below it owns:
// where the file is, the choices of its own sections (the gossip profile,
// the shutdown announcement, the Leases' namespace that agents, fencers
// and the on-call commands share), where fence agents are looked for, and
// the agent's API client. Those a package owns are that package's, each
// with its reason, and the loader starts from them or leaves unset what
// the file does not set (Config says which):
//   - the gossip section: the ring's (heartbeat.DefaultConfig, FastConfig);
//   - the policy section's decision settings: the core's
//     (core.DefaultPolicy, which resolvePolicy overrides);
//   - the bmc inventory, fenceDevices[].timeout and fencer.powerTimeout:
//     pkg/fencing/device's (defaults.go there; device.WithDefaults);
//   - the fencer section's timings: pkg/fencing's (defaults.go there);
//   - policy.staleAttachmentGrace and deleteStaleVolumeAttachments:
//     pkg/stale's (stale.DefaultGrace, stale.DefaultDelete).
//
// docs/configuration.md is written from these.
const (
	// DefaultPath is where fenced looks for its configuration when neither
	// --config nor FENCED_CONFIG is given.
	DefaultPath = "/etc/fenced/config.yaml"

	// DefaultGossipProfile is the failure detector's timings when the
	// gossip section names none: memberlist's LAN profile (GossipProfiles).
	DefaultGossipProfile = GossipProfileLAN
	// DefaultShutdownAnnounce: agents announce clean shutdowns (it needs
	// logind; without it the agent says so and works on).
	DefaultShutdownAnnounce = true
	// DefaultLeaseNamespace is where the power Leases live.
	DefaultLeaseNamespace = "fenced-system"
)

// Defaults of the agent that the configuration file does not expose.
const (
	// DefaultClientQPS and DefaultClientBurst bound the agent's requests to
	// the API server. At rest an agent makes none (watches only); a
	// fencer fencing a node makes about a dozen (the kubelet Lease before
	// the read and before the write, the Node and its taint, its status,
	// its pods, the Events). client-go's own 5 per second serialised a
	// dark rack of 40 nodes into more than a minute, long enough for the
	// power readings to age past the policy's MaxEvidenceAge and be read
	// again; 50 a second, burst 100, still held the last of the rack's
	// taints 3–6 s behind its power reading (make bench-scale). The
	// limiter is there against a runaway loop, not to pace the fences:
	// 200 a second with a burst of 400 takes a rack's ~500 requests at
	// once, and the API server's priority and fairness still protects it.
	DefaultClientQPS   = 200
	DefaultClientBurst = 400
)

// GossipProfiles are the failure detector's timings each gossip.profile
// stands for, the ring's own (heartbeat.DefaultConfig for lan,
// heartbeat.FastConfig for fast); the explicit fields of the gossip
// section override them one by one.
var GossipProfiles = map[GossipProfile]GossipTimings{
	GossipProfileLAN:  timingsOf(heartbeat.DefaultConfig()),
	GossipProfileFast: timingsOf(heartbeat.FastConfig()),
}

// timingsOf is the failure detector's part of a ring configuration.
func timingsOf(c heartbeat.Config) GossipTimings {
	return GossipTimings{ProbeInterval: c.ProbeInterval, ProbeTimeout: c.ProbeTimeout,
		SuspicionMult: c.SuspicionMult, GossipInterval: c.GossipInterval}
}

// Limits enforced by validation.
const (
	maxBMCTimeout = 5 * time.Minute
	maxBMCRetries = 10
	// maxPowerReads bounds fencer.maxConcurrentPowerReads.
	maxPowerReads = 1024
)

// minBeatInterval and maxBeatInterval bound gossip.beatInterval.
const (
	minBeatInterval = 50 * time.Millisecond
	maxBeatInterval = 5 * time.Second
)

// maxFenceAgentTimeout bounds fenceDevices[].timeout.
const maxFenceAgentTimeout = 10 * time.Minute

// DefaultFenceAgentDirs are where a fence agent named without a path is
// looked for: Debian's and Red Hat's fence-agents packages install into
// /usr/sbin. The loader looks (FindFenceAgent), so that a missing agent is
// an error of the file; the device package uses the path it found.
var DefaultFenceAgentDirs = []string{"/usr/sbin", "/usr/local/sbin", "/sbin"}
