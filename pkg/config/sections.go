package config

import (
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"fenced.io/fenced/pkg/heartbeat"
)

// orInt is v, or def when v is 0 (unset).
func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func duration(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

func resolveGossip(fe *fieldErrors, g GossipSpec) Gossip {
	profile := first(g.Profile, DefaultGossipProfile)
	base, ok := GossipProfiles[profile]
	if !ok {
		fe.add("gossip", "profile", "%q is not a profile (lan or fast)", profile)
		base = GossipProfiles[DefaultGossipProfile]
	}
	// 0 in a field means the profile's value, as leaving it out does.
	r := Gossip{
		Port:    first(g.Port, heartbeat.DefaultPort),
		KeyFile: g.KeyFile,
		KeyDir:  g.KeyDir,
		Profile: profile,
		GossipTimings: GossipTimings{
			ProbeInterval:  first(duration(g.ProbeInterval, 0), base.ProbeInterval),
			ProbeTimeout:   first(duration(g.ProbeTimeout, 0), base.ProbeTimeout),
			SuspicionMult:  orInt(g.SuspicionMult, base.SuspicionMult),
			GossipInterval: first(duration(g.GossipInterval, 0), base.GossipInterval),
		},
		BeatInterval: first(duration(g.BeatInterval, 0), heartbeat.DefaultBeatInterval),
	}
	if r.KeyFile != "" && r.KeyDir != "" {
		fe.add("gossip", "keyDir", "set keyFile or keyDir, not both (keyDir's file \"key\" is the primary key)")
	}
	if r.Port < 1 || r.Port > 65535 {
		fe.add("gossip", "port", "%d is not a port (1-65535)", r.Port)
	}
	for field, d := range map[string]time.Duration{"probeInterval": r.ProbeInterval, "probeTimeout": r.ProbeTimeout, "gossipInterval": r.GossipInterval} {
		if d < 0 || d > time.Minute {
			fe.add("gossip", field, "%s is out of range (0 for the default, at most 1m)", d)
		}
	}
	// Faster than 50ms is traffic for nothing (a fencer of 1000 nodes
	// would take 20 000 packets a second); slower than 5s detects later
	// than gossip does.
	if r.BeatInterval < minBeatInterval || r.BeatInterval > maxBeatInterval {
		fe.add("gossip", "beatInterval", "%s is out of range (0 for the default %s, %s to %s)", r.BeatInterval, heartbeat.DefaultBeatInterval, minBeatInterval, maxBeatInterval)
	}
	if r.SuspicionMult < 0 || r.SuspicionMult > 20 {
		fe.add("gossip", "suspicionMult", "%d is out of range (0 for the default, at most 20)", r.SuspicionMult)
	}
	// memberlist sends the indirect probes in what is left of the interval
	// after the direct probe's timeout: none would go out.
	if r.ProbeTimeout > 0 && r.ProbeInterval > 0 && r.ProbeTimeout >= r.ProbeInterval {
		fe.add("gossip", "probeTimeout", "%s must be shorter than probeInterval %s (profile %s)", r.ProbeTimeout, r.ProbeInterval, profile)
	}
	return r
}

// resolvePolicy is the one place the decision core's policy is built from
// the configuration: core.DefaultPolicy(), with what the policy section
// sets over it. The stale report's settings stay unset (zero) unless the
// section sets them: they are pkg/stale's to default.
func resolvePolicy(fe *fieldErrors, p PolicySpec) Policy {
	def := core.DefaultPolicy()
	r := Policy{
		Policy:               def,
		StaleAttachmentGrace: duration(p.StaleAttachmentGrace, 0),
	}
	r.Mode = first(p.Mode, def.Mode)
	r.FenceAfter = duration(p.FenceAfter, def.FenceAfter)
	r.MaxConcurrentPowerActions = first(p.MaxConcurrentPowerActions, def.MaxConcurrentPowerActions)
	r.FenceDelay = duration(p.FenceDelay, def.FenceDelay)
	r.ShutdownWait = duration(p.ShutdownWait, def.ShutdownWait)
	r.RestartWait = duration(p.RestartWait, def.RestartWait)
	if !r.Mode.Valid() {
		fe.add("policy", "mode", "unknown mode %q (want %s or %s)", r.Mode, vocab.ModeConfirmOnly, vocab.ModePowerOff)
	}
	if r.FenceAfter < 0 {
		fe.add("policy", "fenceAfter", "%s is negative", r.FenceAfter)
	}
	if p.MaxUnhealthy != "" {
		pct, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(p.MaxUnhealthy), "%"), 64)
		if err != nil || !strings.HasSuffix(p.MaxUnhealthy, "%") || math.IsNaN(pct) || pct < 0 || pct > 100 {
			fe.add("policy", "maxUnhealthy", "%q is not a percentage like \"50%%\"", p.MaxUnhealthy)
		}
		r.MaxUnhealthy = pct / 100
	}
	if r.MaxConcurrentPowerActions < 1 {
		fe.add("policy", "maxConcurrentPowerActions", "%d: at least 1", r.MaxConcurrentPowerActions)
	}
	if r.FenceDelay < 0 || r.FenceDelay > 10*time.Minute {
		fe.add("policy", "fenceDelay", "%s is out of range (0 to 10m)", r.FenceDelay)
	}
	switch p.AfterFence {
	case "":
	case vocab.PowerOff:
		r.PowerOnAfterFence = false
	case vocab.PowerOn:
		r.PowerOnAfterFence = true
	default:
		fe.add("policy", "afterFence", "%q: want %s or %s", p.AfterFence, vocab.PowerOff, vocab.PowerOn)
	}
	if r.ShutdownWait < 0 || r.ShutdownWait > time.Hour {
		fe.add("policy", "shutdownWait", "%s is out of range (0 to 1h; 0 does not wait)", r.ShutdownWait)
	}
	if r.RestartWait < 0 || r.RestartWait > time.Hour {
		fe.add("policy", "restartWait", "%s is out of range (0 to 1h; 0 does not wait)", r.RestartWait)
	}
	if p.StaleAttachmentGrace != nil && (r.StaleAttachmentGrace < 10*time.Second || r.StaleAttachmentGrace > 24*time.Hour) {
		fe.add("policy", "staleAttachmentGrace", "%s is out of range (10s to 24h)", r.StaleAttachmentGrace)
	}
	if p.DeleteStaleVolumeAttachments != nil {
		r.DeleteStaleVolumeAttachments = *p.DeleteStaleVolumeAttachments
	}
	if p.ForceDeletePods != nil {
		r.ForceDeletePods = *p.ForceDeletePods
	}
	if p.DryRun != nil {
		r.DryRun = *p.DryRun
	}
	return r
}

// resolveFencer leaves unset what the section does not set: the fencer's
// timings are pkg/fencing's and pkg/fencing/device's to default.
// resolveWatchdog validates the watchdog section against the topology:
// a watchdog level needs a device to arm. It returns the section and the
// order delay (core's default when unset).
func resolveWatchdog(fe *fieldErrors, w WatchdogSpec, t Topology) (Watchdog, time.Duration) {
	r := Watchdog{Device: w.Device, AllowSoftware: w.AllowSoftware,
		Timeout: duration(w.Timeout, core.DefaultWatchdogTimeout), Confirm: duration(w.Confirm, core.DefaultWatchdogConfirm)}
	orderAfter := duration(w.OrderAfter, core.DefaultPolicy().WatchdogOrderAfter)
	switch {
	case t.hasWatchdogLevel() && r.Device == "":
		fe.add("watchdog", "device", "required: the topology has a watchdog level, and its nodes' agents need a device to arm (e.g. /dev/watchdog0)")
	case r.Device != "" && !filepath.IsAbs(strings.TrimPrefix(r.Device, vocab.WatchdogSocketPrefix)):
		fe.add("watchdog", "device", "%q is not an absolute path (a device such as /dev/watchdog0, or unix: and a socket's path)", r.Device)
	}
	if r.Timeout < time.Second || r.Timeout > 10*time.Minute || r.Timeout%time.Second != 0 {
		fe.add("watchdog", "timeout", "%s is out of range (whole seconds, 1s to 10m)", r.Timeout)
	}
	if r.Confirm < 3*time.Second || r.Confirm > 10*time.Minute {
		fe.add("watchdog", "confirm", "%s is out of range (3s to 10m)", r.Confirm)
	}
	if orderAfter < MinWatchdogOrderAfter || orderAfter > 10*time.Minute {
		fe.add("watchdog", "orderAfter", "%s is out of range (%s to 10m: a kubelet renews its node Lease every 10 s, so a shorter silence also falls between two renewals of a live node, whose stalled agent would then be ordered to reset it)",
			orderAfter, MinWatchdogOrderAfter)
	}
	return r, orderAfter
}

// MinWatchdogOrderAfter is the shortest watchdog.orderAfter: longer than
// the kubelet's node Lease renew interval (10 s, a quarter of its default
// 40 s duration), so that the kubelet's silence it counts on is one no
// live kubelet keeps. The e2e scenarios found what a shorter one does: an
// agent that stalls for a few seconds is ordered between two renewals of
// its kubelet, and its node resets.
const MinWatchdogOrderAfter = 10 * time.Second

// isWatchdogLevel reports whether l is the watchdog level.
func isWatchdogLevel(l Level) bool { return len(l) == 1 && l[0].Device == DeviceWatchdog }

// hasWatchdogLevel reports whether any node's levels end in the watchdog.
func (t Topology) hasWatchdogLevel() bool {
	used := slices.ContainsFunc(t.Defaults, isWatchdogLevel)
	for _, ls := range t.Nodes {
		used = used || slices.ContainsFunc(ls, isWatchdogLevel)
	}
	return used
}

func resolveFencer(fe *fieldErrors, f FencerSpec) Fencer {
	r := Fencer{
		LeaseNamespace:          first(f.LeaseNamespace, DefaultLeaseNamespace),
		LeaseDuration:           duration(f.LeaseDuration, 0),
		PowerTimeout:            duration(f.PowerTimeout, 0),
		MaxConcurrentPowerReads: f.MaxConcurrentPowerReads,
	}
	if f.MonitorInterval != nil {
		r.MonitorInterval = new(f.MonitorInterval.Duration)
	}
	if n := r.MaxConcurrentPowerReads; n != 0 && (n < 1 || n > maxPowerReads) {
		fe.add("fencer", "maxConcurrentPowerReads", "%d is out of range (1 to %d)", n, maxPowerReads)
	}
	if d := r.MonitorInterval; d != nil && *d != 0 && (*d < 10*time.Second || *d > 24*time.Hour) {
		fe.add("fencer", "monitorInterval", "%s is out of range (0 disables; else 10s to 24h)", *d)
	}
	if msgs := validation.IsDNS1123Label(r.LeaseNamespace); len(msgs) > 0 {
		fe.add("fencer", "leaseNamespace", "not a namespace name: %s", strings.Join(msgs, "; "))
	}
	if f.LeaseDuration != nil && (r.LeaseDuration < 3*time.Second || r.LeaseDuration > 5*time.Minute) {
		fe.add("fencer", "leaseDuration", "%s is out of range (3s to 5m)", r.LeaseDuration)
	}
	if f.PowerTimeout != nil && (r.PowerTimeout < time.Second || r.PowerTimeout > 10*time.Minute) {
		fe.add("fencer", "powerTimeout", "%s is out of range (1s to 10m)", r.PowerTimeout)
	}
	return r
}
