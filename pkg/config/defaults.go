package config

import (
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// Every default of the configuration file is here, and only here. The
// README's configuration reference is written from this file.
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

// Defaults of the gossip, policy and fencer sections.
const (
	// DefaultGossipPort is memberlist's standard port.
	DefaultGossipPort = 7946
	// DefaultGossipProfile is the failure detector's timings when the
	// gossip section names none: memberlist's LAN profile (GossipProfiles).
	DefaultGossipProfile = GossipProfileLAN
	// DefaultGossipProbeInterval, DefaultGossipProbeTimeout,
	// DefaultGossipSuspicionMult and DefaultGossipInterval are memberlist's
	// LAN profile, under which a dead member is declared after about 6 s in
	// a 10-node ring (SuspicionMult × log10(N) × ProbeInterval, shortened by
	// confirmations). A false suspicion costs one BMC read, never a taint.
	DefaultGossipProbeInterval = time.Second
	DefaultGossipProbeTimeout  = 500 * time.Millisecond
	DefaultGossipSuspicionMult = 4
	DefaultGossipInterval      = 200 * time.Millisecond
	// FastGossipProbeInterval, FastGossipProbeTimeout,
	// FastGossipSuspicionMult and FastGossipInterval are the fast profile
	// (gossip.profile: fast), chosen from `make bench-gossip`: a crashed
	// member is seen dead by all in ~1-2 s in rings of 10 to 100 on a LAN,
	// for more packets and more false suspicions (each one BMC read)
	// than the LAN profile; README "Measurements" has the figures.
	FastGossipProbeInterval = 300 * time.Millisecond
	FastGossipProbeTimeout  = 150 * time.Millisecond
	FastGossipSuspicionMult = 3
	FastGossipInterval      = 100 * time.Millisecond
	// DefaultMode only ever taints nodes whose BMC already reads off.
	DefaultMode = vocab.ModeConfirmOnly
	// DefaultFenceAfter: a node must be gone on both channels this long
	// before power-off mode switches it off (Kubernetes itself declares a
	// node NotReady after 50 s).
	DefaultFenceAfter = 60 * time.Second
	// DefaultMaxUnhealthyPercent: no power actions when more than half of
	// the nodes are down — that is a network problem, not node failures.
	DefaultMaxUnhealthyPercent = 50
	// DefaultMaxConcurrentPowerActions: one node at a time.
	DefaultMaxConcurrentPowerActions = 1
	// DefaultFenceDelay: a last chance for the node to come back.
	DefaultFenceDelay = 5 * time.Second
	// DefaultAfterFence leaves a node switched off by fenced off.
	DefaultAfterFence = vocab.PowerOff
	// DefaultForceDeletePods: release volumes without waiting for the pod
	// garbage collector.
	DefaultForceDeletePods = true
	// DefaultShutdownWait covers the kubelet's usual shutdownGracePeriod:
	// a node that says it is shutting down is not read or switched off
	// for this long while its agent is still in the ring.
	DefaultShutdownWait = 5 * time.Minute
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
	// DefaultDryRun: fencers act. Set policy.dryRun for a trial period:
	// everything is decided and reported, nothing is changed.
	DefaultDryRun = false
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

// Defaults of the decision core and the fencer that the configuration
// file does not expose: how often to ask, how long to believe.
const (
	// DefaultReadBackoffMin and DefaultReadBackoffMax bound the delay
	// between reads of a power device that failed: soon enough to fence
	// quickly once it answers, rarely enough not to hammer a broken one.
	DefaultReadBackoffMin = time.Second
	DefaultReadBackoffMax = 30 * time.Second
	// DefaultRecheckPoweredOn: a node that is unresponsive but powered on
	// is read again this often (a person may switch it off meanwhile).
	DefaultRecheckPoweredOn = 10 * time.Second
	// DefaultChallengeInterval: in power-off mode, the agent of a node
	// that may be switched off is asked for a proof of life this often.
	DefaultChallengeInterval = 5 * time.Second
	// DefaultChallengeTimeout: an agent that does not answer a liveness
	// challenge within this is silent. Answers take milliseconds.
	DefaultChallengeTimeout = 2 * time.Second
	// DefaultStormWindow: clean-shutdown fences within this window count
	// for the storm guard (a planned shutdown of many nodes takes minutes).
	DefaultStormWindow = 10 * time.Minute
	// DefaultMaxEvidenceAge: a power reading older than this when its taint
	// is written is read again. A taint follows its reading within
	// milliseconds; an older one means the write was held up (an API
	// server outage), and the node may be back since.
	DefaultMaxEvidenceAge = 10 * time.Second
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
	// the power readings to age past DefaultMaxEvidenceAge and be read
	// again (make bench-scale). Fifty a second fences that rack within
	// seconds; the API server's priority and fairness still protects it.
	DefaultClientQPS   = 50
	DefaultClientBurst = 100
)

// GossipProfiles are the failure detector's timings each gossip.profile
// stands for; the explicit fields of the gossip section override them one
// by one.
var GossipProfiles = map[GossipProfile]GossipTimings{
	GossipProfileLAN: {ProbeInterval: DefaultGossipProbeInterval, ProbeTimeout: DefaultGossipProbeTimeout,
		SuspicionMult: DefaultGossipSuspicionMult, GossipInterval: DefaultGossipInterval},
	GossipProfileFast: {ProbeInterval: FastGossipProbeInterval, ProbeTimeout: FastGossipProbeTimeout,
		SuspicionMult: FastGossipSuspicionMult, GossipInterval: FastGossipInterval},
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
