package core

import (
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// Policy holds the decision settings. DefaultPolicy gives their defaults;
// pkg/config overrides what the configuration file sets.
type Policy struct {
	Mode vocab.Mode
	// FenceAfter is how long a node must be unresponsive on both channels
	// (gossip and Kubernetes) before it may be switched off.
	FenceAfter time.Duration
	// MaxUnhealthy is the largest share of Nodes (0..1) that may be down
	// for power actions to be allowed at all.
	MaxUnhealthy float64
	// MaxConcurrentPowerActions across all fencers (counted by Leases).
	MaxConcurrentPowerActions int
	// FenceDelay is the pause between taking the Lease and switching off,
	// a last chance for the node to come back.
	FenceDelay time.Duration
	// PowerOnAfterFence switches a node fenced by power-off on again once
	// its volumes are released, so capacity returns by itself.
	PowerOnAfterFence bool
	// ForceDeletePods deletes the node's pods (grace 0) once tainted.
	ForceDeletePods bool
	// ReadBackoffMin/Max bound the retry delay after a failed BMC read.
	ReadBackoffMin, ReadBackoffMax time.Duration
	// RecheckPoweredOn is how often a node that is unresponsive but powered
	// on is read again (it may be switched off by a person meanwhile).
	RecheckPoweredOn time.Duration
	// ShutdownWait is how long a node that is shutting down cleanly (its
	// agent announced it, or its kubelet reports it) while its agent is
	// still in the ring is left alone — no BMC read, no power action —
	// waiting for its shutdown-complete announcement. 0: not at all.
	ShutdownWait time.Duration
	// RestartWait is how long a node whose agent left the ring announcing
	// a restart (its own signed word, for its current boot) is left alone
	// while its kubelet stays Ready and renews its Lease: no suspicion, no
	// power read, no Event. A DaemonSet rollout restarts every agent. 0:
	// not at all (a restart is a suspicion like any leave).
	RestartWait time.Duration
	// ChallengeInterval is how often the agent of a node that may be
	// switched off is asked for a proof of life.
	ChallengeInterval time.Duration
	// SilentChallengeTimeout is how long the agent of a node whose beats
	// to this fencer stopped has to answer a liveness challenge (0: the
	// fencer's own bound for every challenge).
	SilentChallengeTimeout time.Duration
	// StormWindow is how far back clean-shutdown fences count for the
	// storm guard: more than MaxUnhealthy of the nodes tainted on their own
	// word within it stops that kind of evidence.
	StormWindow time.Duration
	// MaxEvidenceAge is how old a power reading may be when its taint is
	// written; an older one is read again first (the write was held up,
	// say by an API server outage, and the node may be back since).
	MaxEvidenceAge time.Duration
	// DryRun (policy.dryRun): decide and report everything, change
	// nothing — every effect leaves as ActHeld (hold.go).
	DryRun bool
	// WatchdogOrderAfter is how long a node must be silent on the channels
	// no other node can forge — its agent to every liveness challenge, its
	// kubelet's Lease unrenewed — before a fence order for its watchdog
	// level is written (watchdoglevel.go). An order resets a live node, so
	// a stall of a few seconds must not lead to one. The default is one
	// renewal interval of the kubelet's Lease (10 s) and 2 s of slack for
	// a renewal on its way, while the agent is asked every
	// ChallengeInterval: a node that lost its power is ordered ~13 s after,
	// and tainted WatchdogWait later (~56 s with the agent's defaults).
	WatchdogOrderAfter time.Duration
	// WatchdogAllowSoftware takes the armed statement of a software
	// watchdog (Linux softdog: a kernel timer that a hung kernel never
	// runs) as the watchdog level's precondition; refused otherwise.
	WatchdogAllowSoftware bool
}

// DefaultPolicy is the policy of a configuration that sets nothing. The
// core owns these defaults; pkg/config starts from them and overrides
// what the file's policy section sets (the file exposes Mode, FenceAfter,
// MaxUnhealthy, MaxConcurrentPowerActions, FenceDelay, PowerOnAfterFence
// as afterFence, ForceDeletePods, ShutdownWait, RestartWait and DryRun; the rest is
// fixed here).
func DefaultPolicy() Policy {
	return Policy{
		// Only ever taint nodes whose power device already reads off.
		Mode: vocab.ModeConfirmOnly,
		// A node must be gone on both channels this long before power-off
		// mode switches it off (Kubernetes itself declares a node NotReady
		// after 50 s).
		FenceAfter: 60 * time.Second,
		// No power actions when more than half of the nodes are down — that
		// is a network problem, not node failures.
		MaxUnhealthy: 0.5,
		// One node at a time.
		MaxConcurrentPowerActions: 1,
		// A last chance for the node to come back.
		FenceDelay: 5 * time.Second,
		// A node switched off by fenced stays off (afterFence: off).
		PowerOnAfterFence: false,
		// Release volumes without waiting for the pod garbage collector.
		ForceDeletePods: true,
		// The delay between reads of a power device that failed: soon enough
		// to fence quickly once it answers, rarely enough not to hammer a
		// broken one.
		ReadBackoffMin: time.Second,
		ReadBackoffMax: 30 * time.Second,
		// A person may switch an unresponsive, powered-on node off meanwhile.
		RecheckPoweredOn: 10 * time.Second,
		// Covers the kubelet's usual shutdownGracePeriod: a node that says it
		// is shutting down is not read or switched off for this long while
		// its agent is still in the ring.
		ShutdownWait: 5 * time.Minute,
		// Covers a DaemonSet rollout's restart of one agent, image pull
		// included; an agent that does not come back within it is suspected
		// like any other.
		RestartWait: 2 * time.Minute,
		// In power-off mode, the agent of a node that may be switched off is
		// asked for a proof of life this often.
		ChallengeInterval: 5 * time.Second,
		// An agent answers a challenge within milliseconds, a starved one
		// within a few hundred; one whose beats have stopped for over a
		// second already and that stays silent this long too is taken as
		// silent, so that an off reading of its power taints it at once. The
		// challenge guards only against a power device that reads off a
		// live node (a mislabelled plug), which the device monitor looks
		// for all along; it is not what detects the node's loss.
		SilentChallengeTimeout: 500 * time.Millisecond,
		// Clean-shutdown fences within this window count for the storm guard
		// (a planned shutdown of many nodes takes minutes).
		StormWindow: 10 * time.Minute,
		// A power reading older than this when its taint is written is read
		// again. A taint follows its reading within milliseconds; an older
		// one means the write was held up (an API server outage), and the
		// node may be back since.
		MaxEvidenceAge: 10 * time.Second,
		// Fencers act. Set policy.dryRun for a trial period: everything is
		// decided and reported, nothing is changed.
		DryRun: false,
		// A kubelet renews its Lease every 10 s (see the field).
		WatchdogOrderAfter: 12 * time.Second,
	}
}
