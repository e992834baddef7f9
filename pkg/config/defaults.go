package config

import "time"

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
	// DefaultMode only ever taints nodes whose BMC already reads off.
	DefaultMode = "confirm-only"
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
	DefaultAfterFence = "off"
	// DefaultForceDeletePods: release volumes without waiting for the pod
	// garbage collector.
	DefaultForceDeletePods = true
	// DefaultShutdownWait covers the kubelet's usual shutdownGracePeriod:
	// a node that says it is shutting down is not read or switched off
	// for this long while its agent is still in the ring.
	DefaultShutdownWait = 5 * time.Minute
	// DefaultShutdownAnnounce: agents announce clean shutdowns (it needs
	// logind; without it the agent says so and works on).
	DefaultShutdownAnnounce = true
	// DefaultLeaseNamespace is where the power Leases live.
	DefaultLeaseNamespace = "fenced-system"
	// DefaultLeaseDuration: a fencer that dies mid-action loses its Lease
	// within this time, and another fencer takes over.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultPowerTimeout is fence_ipmilan's power_timeout.
	DefaultPowerTimeout = 20 * time.Second
)

// Limits enforced by validation.
const (
	maxBMCTimeout = 5 * time.Minute
	maxBMCRetries = 10
)
