package config

import (
	"time"

	"fenced.io/fenced/pkg/heartbeat"
)

// The defaults of the configuration file that no package below it owns.
// Those a package owns are that package's, and the loader starts from
// them, overriding only what the file sets: the gossip section's are the
// ring's (heartbeat.DefaultConfig, heartbeat.FastConfig), the policy
// section's decision settings the core's (core.DefaultPolicy,
// pkg/fencing/core/policy.go, which resolvePolicy overrides).
// docs/configuration.md is written from these.
const (
	// DefaultPath is where fenced looks for its configuration when neither
	// --config nor FENCED_CONFIG is given.
	DefaultPath = "/etc/fenced/config.yaml"

	// DefaultIPMIPort is the standard RMCP port.
	DefaultIPMIPort = 623
	// DefaultRedfishHTTPSPort and DefaultRedfishHTTPPort are the standard
	// web ports.
	DefaultRedfishHTTPSPort = 443
	DefaultRedfishHTTPPort  = 80

	// DefaultBMCTimeout bounds one attempt of one BMC request. BMCs answer
	// in milliseconds when healthy; a few seconds covers a busy one.
	DefaultBMCTimeout = 5 * time.Second
	// DefaultBMCRetries is the number of further attempts after a timeout
	// (IPMI runs over UDP, where single datagrams get lost).
	DefaultBMCRetries = 2

	// DefaultIPMICipherSuite is RMCP+ suite 3 (HMAC-SHA1, HMAC-SHA1-96,
	// AES-CBC-128), the suite ipmitool uses and every BMC implements.
	DefaultIPMICipherSuite = 3
	// DefaultIPMIPrivilegeLevel can switch power (needed for power-off mode
	// and `fenced bmc off`).
	DefaultIPMIPrivilegeLevel = "administrator"

	// DefaultRedfishScheme is https.
	DefaultRedfishScheme = "https"
	// DefaultRedfishAuth uses a Redfish session (one login per operation).
	DefaultRedfishAuth = "session"
)

// Defaults of the gossip, policy (beyond core.DefaultPolicy) and fencer
// sections.
const (
	// DefaultGossipProfile is the failure detector's timings when the
	// gossip section names none: memberlist's LAN profile (GossipProfiles).
	DefaultGossipProfile = GossipProfileLAN
	// DefaultStaleAttachmentGrace: a VolumeAttachment must look stale
	// (diagnose.StaleAttachment finds nothing against it) this long without
	// a break before a fencer reports it. Two minutes outlast the informers'
	// lag and a kubelet's mount of a pod that just started (volumesInUse is
	// written before the mount), yet an alert fires long before a person
	// would have found the cause by hand.
	DefaultStaleAttachmentGrace = 2 * time.Minute
	// DefaultDeleteStaleVolumeAttachments: fencers report stale
	// VolumeAttachments and never delete them unless told to (and given
	// the RBAC for it, deploy/daemonset/components/delete-stale-volumeattachments).
	DefaultDeleteStaleVolumeAttachments = false
	// DefaultShutdownAnnounce: agents announce clean shutdowns (it needs
	// logind; without it the agent says so and works on).
	DefaultShutdownAnnounce = true
	// DefaultLeaseNamespace is where the power Leases live.
	DefaultLeaseNamespace = "fenced-system"
	// DefaultLeaseDuration: a fencer that dies mid-action loses its Lease
	// within this time, and another fencer takes over.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultFenceAgentTimeout bounds one run of a fence agent: its login
	// (login_timeout 5 s), the request and, for off/on, its own wait for
	// the new state (power_wait, then polls up to power_timeout 20 s) —
	// fence agents' defaults, with a margin.
	DefaultFenceAgentTimeout = 60 * time.Second
	// DefaultMonitorInterval: every fencer checks every power device every
	// 5 minutes (±10 %), 12 sessions per device and fencer per hour — a
	// broken password or a dead PDU is found within minutes, at a cost no
	// BMC notices (Pacemaker's stonith monitor default is 60 s).
	DefaultMonitorInterval = 5 * time.Minute
	// DefaultPowerTimeout is fence_ipmilan's power_timeout.
	DefaultPowerTimeout = 20 * time.Second
	// DefaultMaxConcurrentPowerReads bounds the power reads one fencer has
	// in flight at once. A rack that goes dark makes forty nodes suspect in
	// the same second; unbounded, that is forty BMC sessions — or forty
	// fence agent processes (a Python interpreter each) for a PDU level.
	// Sixteen reads a 40-node rack whose BMCs answer in three waves of
	// milliseconds; dark BMCs hold a slot for their whole timeout
	// (bmc.timeout × (1 + bmc.retries)), which is what a larger bound buys.
	DefaultMaxConcurrentPowerReads = 16
)

// Defaults of the fencer and the agent that the configuration file does
// not expose: how long to wait for an answer, how fast to ask. (The
// decision core's own, such as its read pace, are core.DefaultPolicy's.)
const (
	// DefaultChallengeTimeout: an agent that does not answer a liveness
	// challenge within this is silent. Answers take milliseconds.
	DefaultChallengeTimeout = 2 * time.Second
	// DefaultKubeletLeaseReadTimeout: before each power request the
	// fencer reads the node's kubelet Lease from the API server (the
	// renewal a later sign of life must beat); an API server that does not
	// answer within this must not delay the reading.
	DefaultKubeletLeaseReadTimeout = 2 * time.Second
	// DefaultClientQPS and DefaultClientBurst bound the agent's requests to
	// the API server. At rest an agent makes none (watches only); a
	// fencer fencing a node makes about six (the kubelet Lease twice, the
	// Node, its status, the pods). client-go's own 5 per second serialise
	// a dark rack of 40 nodes into more than a minute, long enough for
	// the power readings to age past the policy's MaxEvidenceAge and be read
	// again (make bench-scale). Fifty a second fences that rack within
	// seconds; the API server's priority and fairness still protects it.
	DefaultClientQPS   = 50
	DefaultClientBurst = 100
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

// maxFenceAgentTimeout bounds fenceDevices[].timeout.
const maxFenceAgentTimeout = 10 * time.Minute

// DefaultFenceAgentDirs are where a fence agent named without a path is
// looked for: Debian's and Red Hat's fence-agents packages install into
// /usr/sbin.
var DefaultFenceAgentDirs = []string{"/usr/sbin", "/usr/local/sbin", "/sbin"}
