package config

import "reflect"

// What a running agent may take from a changed configuration file, and
// what only a restart applies. A fencer reloads its power devices and
// their order (bmc, fenceDevices, topology), the decision policy (policy,
// but for the stale VolumeAttachment report's two settings) and the
// timings of a power action (fencer.leaseDuration, fencer.powerTimeout):
// each is read afresh by every decision and every power request. The rest
// is wired into something built once at start — the gossip ring and its
// label and key source, the logind lock, the fencer's Lease informers and
// its read bound, the device monitor's timer, the stale report — or
// decides whether the agent is a fencer at all.

// reloadable are the settings a running fencer applies without a
// restart, by their paths in the file; a path stands for everything under
// it. Not read by the reloader (which applies the whole file but for
// restartOnly): it exists so that every field of Configuration is
// classified here or in restartOnly, which TestEveryFieldClassified
// checks — a field added to the file without a thought about reloading
// fails there.
var reloadable = []string{
	"bmc",
	"fenceDevices",
	"topology",
	"policy.mode",
	"policy.fenceAfter",
	"policy.maxUnhealthy",
	"policy.maxConcurrentPowerActions",
	"policy.fenceDelay",
	"policy.afterFence",
	"policy.forceDeletePods",
	"policy.shutdownWait",
	"policy.restartWait",
	"policy.dryRun",
	"fencer.leaseDuration",
	"fencer.powerTimeout",
	"watchdog.allowSoftware",
	"watchdog.orderAfter",
}

// restartOnly are the settings only a restart applies, each with its path
// in the file and the part of a Config that holds it.
var restartOnly = []struct {
	path string
	of   func(*Config) any
}{
	{"clusterName", func(c *Config) any { return c.ClusterName }},
	{"gossip.port", func(c *Config) any { return c.Gossip.Port }},
	{"gossip.keyFile", func(c *Config) any { return c.Gossip.KeyFile }},
	{"gossip.keyDir", func(c *Config) any { return c.Gossip.KeyDir }},
	{"gossip.profile", func(c *Config) any { return c.Gossip.Profile }},
	{"gossip.probeInterval", func(c *Config) any { return c.Gossip.ProbeInterval }},
	{"gossip.probeTimeout", func(c *Config) any { return c.Gossip.ProbeTimeout }},
	{"gossip.suspicionMult", func(c *Config) any { return c.Gossip.SuspicionMult }},
	{"gossip.gossipInterval", func(c *Config) any { return c.Gossip.GossipInterval }},
	{"gossip.beatInterval", func(c *Config) any { return c.Gossip.BeatInterval }},
	{"shutdown.announce", func(c *Config) any { return c.Shutdown.Announce }},
	{"fencer.leaseNamespace", func(c *Config) any { return c.Fencer.LeaseNamespace }},
	{"fencer.monitorInterval", func(c *Config) any { return c.Fencer.MonitorInterval }},
	{"fencer.maxConcurrentPowerReads", func(c *Config) any { return c.Fencer.MaxConcurrentPowerReads }},
	{"policy.staleAttachmentGrace", func(c *Config) any { return c.Policy.StaleAttachmentGrace }},
	{"policy.deleteStaleVolumeAttachments", func(c *Config) any { return c.Policy.DeleteStaleVolumeAttachments }},
	// An agent with power devices is a fencer, one without an observer:
	// the fencer's informers, Leases and gossip role are set up at start.
	{"bmc/fenceDevices/topology (fencer or observer)", func(c *Config) any { return c.CanFence() }},
	// The watchdog is armed, or not, with the timeout and confirm period
	// of the agent's start; its armed statement says them.
	{"watchdog.device", func(c *Config) any { return c.Watchdog.Device }},
	{"watchdog.timeout", func(c *Config) any { return c.Watchdog.Timeout }},
	{"watchdog.confirm", func(c *Config) any { return c.Watchdog.Confirm }},
}

// CanFence reports whether the configuration holds power devices (a BMC
// inventory or fence devices) or a watchdog level in its topology, which
// makes the agent a fencer.
func (c *Config) CanFence() bool {
	return len(c.BMCs) > 0 || len(c.Devices) > 0 || c.Topology.hasWatchdogLevel()
}

// RestartNeeded lists, by their paths in the file, the settings in which
// next differs from running that a running agent cannot take: they apply
// at its next start. Empty when next can be applied whole.
func RestartNeeded(running, next *Config) []string {
	var out []string
	for _, s := range restartOnly {
		if !reflect.DeepEqual(s.of(running), s.of(next)) {
			out = append(out, s.path)
		}
	}
	return out
}
