// Package config loads and validates fenced's configuration file.
//
// The file is one versioned YAML document:
//
//	apiVersion: fenced.io/v1alpha1
//	kind: FencedConfiguration
//	clusterName: ...
//	gossip: {...}       # the ring: port, key file, tuning
//	policy: {...}       # when to fence: mode, fenceAfter, limits
//	fencer: {...}       # fencer-only settings: Lease namespace, timeouts
//	shutdown: {...}     # the clean-shutdown announcement
//	bmc:
//	  defaults: {...}   # a BMCSpec that every node inherits field by field
//	  nodes: [...]      # one NodeBMC per Kubernetes node
//	fenceDevices: [...] # ClusterLabs fence agents (PDUs, hypervisors, ...)
//	topology: {...}     # each node's fencing levels, in order
//	watchdog: {...}     # the watchdog level: what agents arm, what fencers accept
//
// Decoding is strict: an unknown field is an error, so a typo never silently
// falls back to a default. Each package owns its defaults (core.DefaultPolicy,
// heartbeat.DefaultConfig, pkg/fencing/device's, pkg/fencing's, pkg/stale's);
// the loader starts from them or leaves unset what the file does not set
// (Config says which). defaults.go holds only the file's own.
package config

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/vocab"
)

// APIVersion and Kind identify the configuration file format.
const (
	APIVersion = "fenced.io/v1alpha1"
	Kind       = "FencedConfiguration"
)

// Protocols a BMC can be reached with.
const (
	ProtocolIPMI    = "ipmi"
	ProtocolRedfish = "redfish"
)

// Configuration is the file format as written by users.
type Configuration struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// ClusterName labels the gossip ring: agents of another cluster on the
	// same network never join it, even with the same key.
	ClusterName string `json:"clusterName,omitempty"`
	// Gossip tunes the ring every agent joins.
	Gossip GossipSpec `json:"gossip,omitempty"`
	// Policy says what fencers may do.
	Policy PolicySpec `json:"policy,omitempty"`
	// Fencer holds settings only fencers use.
	Fencer FencerSpec `json:"fencer,omitempty"`
	// Shutdown configures the clean-shutdown announcement of every agent.
	Shutdown ShutdownSpec `json:"shutdown,omitempty"`
	// BMC is the inventory of baseboard management controllers. Only
	// fencers need it: nodes without an inventory run as observers.
	BMC BMCInventory `json:"bmc,omitempty"`
	// FenceDevices declares the other power devices (PDUs, hypervisors,
	// anything a ClusterLabs fence agent drives), once each.
	FenceDevices []FenceDeviceSpec `json:"fenceDevices,omitempty"`
	// Topology orders each node's devices in levels. Without it a node's
	// only level is its BMC.
	Topology TopologySpec `json:"topology,omitempty"`
	// Watchdog configures the watchdog level (docs/design.md §10): the
	// watchdog the agent of every node whose topology has the level arms,
	// and what fencers accept.
	Watchdog WatchdogSpec `json:"watchdog,omitempty"`
}

// WatchdogSpec is the watchdog section. A node is fenced on its watchdog
// when its topology has the level (the device name "watchdog", a level of
// its own and the last); its agent then arms Device and pets it only while
// it confirms, within Confirm, that no fence order for its boot exists.
type WatchdogSpec struct {
	// Device is the watchdog device agents arm, e.g. /dev/watchdog0, or
	// "unix:" and the path of a socket where a watchdog outside the
	// machine listens (pkg/watchdog's socket protocol; the test harness's
	// machines have one). Required when any node's topology has the
	// watchdog level.
	Device string `json:"device,omitempty"`
	// Timeout is W: the machine resets this long after the last pet
	// (whole seconds, as the Linux watchdog API sets it).
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Confirm is T: the agent pets only while a read of the API that
	// found no order started less than this ago. An API server outage
	// longer than this resets every armed node: make it longer than the
	// outages the cluster rides out (a control-plane upgrade).
	Confirm *metav1.Duration `json:"confirm,omitempty"`
	// AllowSoftware lets agents arm a software watchdog (Linux softdog),
	// and fencers take its armed statement: a kernel timer that a hung
	// kernel never runs, so weaker, and named so on every evidence.
	AllowSoftware bool `json:"allowSoftware,omitempty"`
	// OrderAfter is how long a node must be silent — its agent to every
	// liveness challenge, its kubelet's Lease unrenewed — before a fencer
	// writes a fence order for it (core.Policy.WatchdogOrderAfter).
	OrderAfter *metav1.Duration `json:"orderAfter,omitempty"`
}

// GossipSpec tunes the memberlist ring.
type GossipSpec struct {
	// Port for gossip, UDP and TCP.
	Port int `json:"port,omitempty"`
	// KeyFile holds the ring's encryption key, base64 of 16, 24 or 32
	// bytes (e.g. `head -c 32 /dev/urandom | base64`). This or KeyDir is
	// required unless the agent runs with --insecure-gossip.
	KeyFile string `json:"keyFile,omitempty"`
	// KeyDir holds the ring's keys, one per file, each like KeyFile: the
	// file named "key" encrypts, every other file (names starting with a
	// dot aside, such as a Secret volume's ..data) only decrypts — the keys
	// of a rotation. The agent reads it again every few seconds and
	// changes its keys in place: a Kubernetes Secret mounted as a
	// directory. Not with KeyFile.
	KeyDir string `json:"keyDir,omitempty"`
	// Profile picks the failure detector's timings: lan (memberlist's
	// LAN profile, the default) or fast. The four fields below override
	// the profile's values one by one.
	Profile GossipProfile `json:"profile,omitempty"`
	// ProbeInterval, ProbeTimeout, SuspicionMult and GossipInterval are
	// memberlist's failure-detector settings.
	ProbeInterval  *metav1.Duration `json:"probeInterval,omitempty"`
	ProbeTimeout   *metav1.Duration `json:"probeTimeout,omitempty"`
	SuspicionMult  int              `json:"suspicionMult,omitempty"`
	GossipInterval *metav1.Duration `json:"gossipInterval,omitempty"`
	// BeatInterval is how often every agent sends each fencer a beat (a
	// small packet on the gossip port, encrypted like gossip). A fencer
	// reads a node's power as soon as its beats stop — about 5.5 intervals
	// after the last one, more for a node whose beats come irregularly —
	// whatever the size of the cluster. Default 200ms.
	BeatInterval *metav1.Duration `json:"beatInterval,omitempty"`
}

// GossipProfile names a set of failure-detector timings (GossipProfiles).
type GossipProfile string

// The gossip profiles.
const (
	// GossipProfileLAN is memberlist's LAN profile: dead after ~6 s in a
	// ring of 10, ~14 s in a ring of 1000.
	GossipProfileLAN GossipProfile = "lan"
	// GossipProfileFast declares a crashed member dead within ~2 s in
	// small rings, for more traffic and more false suspicions, each of
	// which costs one BMC read and never a taint.
	GossipProfileFast GossipProfile = "fast"
)

// GossipTimings are memberlist's failure-detector settings.
type GossipTimings struct {
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspicionMult  int
	GossipInterval time.Duration
}

// PolicySpec is what fencers may do.
type PolicySpec struct {
	// Mode is "confirm-only" (taint only nodes whose BMC reads off) or
	// "power-off" (also switch off nodes unresponsive on both channels).
	Mode vocab.Mode `json:"mode,omitempty"`
	// FenceAfter is how long a node must be unresponsive on both channels
	// before power-off mode switches it off.
	FenceAfter *metav1.Duration `json:"fenceAfter,omitempty"`
	// MaxUnhealthy is the largest share of nodes, in percent, that may be
	// down for power actions to be allowed ("50%").
	MaxUnhealthy string `json:"maxUnhealthy,omitempty"`
	// MaxConcurrentPowerActions across all fencers.
	MaxConcurrentPowerActions int `json:"maxConcurrentPowerActions,omitempty"`
	// FenceDelay is the pause between taking the power Lease and switching off.
	FenceDelay *metav1.Duration `json:"fenceDelay,omitempty"`
	// AfterFence is "off" (leave a node fenced by power-off switched off)
	// or "on" (switch it on again once its volumes are released).
	AfterFence vocab.PowerState `json:"afterFence,omitempty"`
	// ForceDeletePods deletes a fenced node's pods at once instead of
	// waiting for the pod garbage collector's 20 s tick.
	ForceDeletePods *bool `json:"forceDeletePods,omitempty"`
	// ShutdownWait is how long fencers leave a node alone that is shutting
	// down cleanly while its agent is still in the ring (no BMC read, no
	// power action), waiting for its shutdown-complete announcement.
	ShutdownWait *metav1.Duration `json:"shutdownWait,omitempty"`
	// RestartWait is how long fencers leave a node alone whose agent left
	// the gossip ring announcing a restart (a rollout, `systemctl
	// restart`), signed with its own key, while its kubelet stays Ready
	// and renews: no power read, no Warning. 0: a restart is suspected
	// like any leave.
	RestartWait *metav1.Duration `json:"restartWait,omitempty"`
	// DryRun: fencers decide and report everything (Events DryRunWould…,
	// fenced_dry_run_actions_total) and change nothing: no taint, no
	// Ready=False, no pod deleted, no power switched.
	DryRun *bool `json:"dryRun,omitempty"`
	// StaleAttachmentGrace is how long a VolumeAttachment on a live node
	// must look stale without a break before fencers report it (and, with
	// DeleteStaleVolumeAttachments, delete it).
	StaleAttachmentGrace *metav1.Duration `json:"staleAttachmentGrace,omitempty"`
	// DeleteStaleVolumeAttachments lets fencers delete a VolumeAttachment
	// they report as stale, after re-checking it on fresh objects, with a
	// precondition on its UID and resourceVersion. Off by default; needs
	// the opt-in RBAC.
	DeleteStaleVolumeAttachments *bool `json:"deleteStaleVolumeAttachments,omitempty"`
}

// ShutdownSpec configures how an agent announces its host's shutdown.
type ShutdownSpec struct {
	// Announce: hold a logind shutdown delay lock and, when the host shuts
	// down, announce shutdown-complete once no CSI volume is mounted, so
	// fencers can taint the node without its BMC.
	Announce *bool `json:"announce,omitempty"`
}

// FencerSpec holds fencer-only settings.
type FencerSpec struct {
	// LeaseNamespace holds the per-node power Leases.
	LeaseNamespace string `json:"leaseNamespace,omitempty"`
	// LeaseDuration of a power Lease (renewed while the action runs).
	LeaseDuration *metav1.Duration `json:"leaseDuration,omitempty"`
	// PowerTimeout bounds the wait for a power action to be confirmed.
	PowerTimeout *metav1.Duration `json:"powerTimeout,omitempty"`
	// MonitorInterval is how often every fencer checks that every power
	// device answers (Pacemaker's monitor operation), so that a dead PDU
	// or a changed password is found before the outage that needs it.
	// 0 disables the checks.
	MonitorInterval *metav1.Duration `json:"monitorInterval,omitempty"`
	// MaxConcurrentPowerReads bounds the power status reads this fencer
	// has in flight at once; reads beyond it wait their turn in order.
	// Power actions are not counted: policy.maxConcurrentPowerActions
	// bounds them.
	MaxConcurrentPowerReads int `json:"maxConcurrentPowerReads,omitempty"`
}

// BMCInventory lists the BMC of every node that fenced may confirm or fence.
type BMCInventory struct {
	// Defaults are inherited by every node for each field the node leaves
	// empty (typically protocol, username and the password source).
	Defaults BMCSpec `json:"defaults,omitempty"`
	// Nodes has one entry per Kubernetes node, by node name.
	Nodes []NodeBMC `json:"nodes,omitempty"`
}

// NodeBMC is the BMC of one node.
type NodeBMC struct {
	// Name is the Kubernetes node name (metadata.name of the Node).
	Name    string `json:"name"`
	BMCSpec `json:",inline"`
}

// BMCSpec describes how to reach and authenticate to one BMC. In
// bmc.defaults every field is optional; after inheritance each node must
// have a protocol, an address, a username and exactly one password source.
type BMCSpec struct {
	// Protocol is "ipmi" (IPMI v2.0 lanplus) or "redfish".
	Protocol string `json:"protocol,omitempty"`
	// Address is the BMC's host name or IP address.
	Address string `json:"address,omitempty"`
	// Port defaults to 623 for IPMI and 443 for Redfish (80 with scheme http).
	Port int `json:"port,omitempty"`
	// Username is the BMC account.
	Username string `json:"username,omitempty"`
	// PasswordFile is a file whose content (trailing newline removed) is
	// the password, e.g. a mounted Secret. It is read for every session, so
	// a rotated Secret takes effect without a restart.
	PasswordFile string `json:"passwordFile,omitempty"`
	// PasswordEnv names an environment variable holding the password.
	PasswordEnv string `json:"passwordEnv,omitempty"`
	// Password is not accepted: it exists only to reject inline passwords
	// with a helpful message instead of "unknown field".
	Password string `json:"password,omitempty"`
	// Timeout bounds one attempt of one BMC request.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Retries is the number of further attempts after a timeout.
	Retries *int `json:"retries,omitempty"`
	// IPMI holds IPMI-only settings.
	IPMI *IPMISpec `json:"ipmi,omitempty"`
	// Redfish holds Redfish-only settings.
	Redfish *RedfishSpec `json:"redfish,omitempty"`
}

// IPMISpec holds the IPMI v2.0 (RMCP+) session settings.
type IPMISpec struct {
	// CipherSuite is the RMCP+ cipher suite ID (1-17; 0 is refused because
	// it authenticates nothing). 3 = HMAC-SHA1 + AES-CBC-128, supported by
	// nearly every BMC; 17 = HMAC-SHA256 where the BMC offers it.
	CipherSuite *int `json:"cipherSuite,omitempty"`
	// PrivilegeLevel requested for the session: "user" can read power,
	// "operator" or "administrator" can also switch it.
	PrivilegeLevel string `json:"privilegeLevel,omitempty"`
}

// RedfishSpec holds the Redfish settings.
type RedfishSpec struct {
	// Scheme is "https" or "http" (http sends credentials in clear text
	// and logs a warning).
	Scheme string `json:"scheme,omitempty"`
	// SystemPath is the ComputerSystem resource, e.g.
	// "/redfish/v1/Systems/1". Empty: the only member of /redfish/v1/Systems.
	SystemPath string `json:"systemPath,omitempty"`
	// Auth is "session" (X-Auth-Token, logged out after each operation)
	// or "basic".
	Auth string `json:"auth,omitempty"`
	// CAFile is a PEM bundle to verify the BMC's certificate with.
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipVerify disables certificate verification (logs a warning).
	InsecureSkipVerify *bool `json:"insecureSkipVerify,omitempty"`
}
