package fencing

import (
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
)

// Settings are the part of a fencer's configuration that a reload may
// change while it runs (Reconfigure): the power devices and the levels
// that order them, the policy, and the timings of a power action. The
// rest of Config is wired into informers, the ring or the read gate when
// the fencer is built, and changes only with a restart.
type Settings struct {
	Inventory Inventory
	Policy    core.Policy
	// LeaseDuration of a power Lease (0: DefaultLeaseDuration).
	LeaseDuration time.Duration
	// Verify controls how power actions are confirmed.
	Verify device.VerifyOptions
}

// withDefaults fills in what s leaves unset.
func (s Settings) withDefaults() Settings {
	if s.LeaseDuration <= 0 {
		s.LeaseDuration = DefaultLeaseDuration
	}
	return s
}

// applied is one Settings as the fencer runs it, never changed once
// applied: a reload swaps the whole of it for another (Fencer.applied), so
// a reader sees the old settings or the new ones, never a mix.
type applied struct {
	Settings
	// ops counts what was started on these settings and still runs —
	// power reads and actions, device monitor rounds — so that the
	// drivers a reload retired are closed only once nothing uses them.
	ops sync.WaitGroup
}

// settings are the settings in force now, for a decision or a check that
// does not outlive the call.
func (f *Fencer) settings() *applied { return f.applied.Load() }

// hold is the settings in force now for an operation that runs on after
// the call (a power read in the background, a monitor round): it runs to
// its end on them, whatever is reloaded meanwhile, and calls release when
// done. The read lock orders hold against Reconfigure's swap, so no
// operation joins settings whose users Reconfigure has begun to wait for.
func (f *Fencer) hold() (s *applied, release func()) {
	f.applyMu.RLock()
	defer f.applyMu.RUnlock()
	s = f.applied.Load()
	s.ops.Add(1)
	return s, s.ops.Done
}

// Reconfigure puts s in force at once and whole: every decision, power
// read, power action and monitor round started from now on uses s; those
// running finish on the settings they started with, and a power read or
// action whose node's devices changed meanwhile is not used (startBMC:
// the new devices are read instead). Every node is decided again. The
// channel it returns is closed once nothing started on the replaced
// settings runs any more: then their retired drivers may be closed.
//
// Nothing here acts on a node: a node the new inventory no longer has is
// not read any more (the core sees it unconfigured and waits), and a taint
// already on it stays until the recovery rule lifts it.
func (f *Fencer) Reconfigure(s Settings) <-chan struct{} {
	next := &applied{Settings: s.withDefaults()}
	f.applyMu.Lock()
	old := f.applied.Swap(next)
	f.applyMu.Unlock()

	f.cfg.Metrics.setDryRun(next.Policy.DryRun)
	f.logChanges(old, next)
	f.requeueAll()

	drained := make(chan struct{})
	go func() {
		old.ops.Wait()
		close(drained)
	}()
	return drained
}

// requeueAll queues every node this fencer knows of, from its Nodes and
// from its own state, to be decided on the settings now in force.
func (f *Fencer) requeueAll() {
	names := map[string]bool{}
	if nodes, err := f.nodes.List(labels.Everything()); err == nil {
		for _, n := range nodes {
			names[n.Name] = true
		}
	}
	f.mu.Lock()
	for n := range f.state {
		names[n] = true
	}
	f.mu.Unlock()
	for n := range names {
		f.queue.Add(n)
	}
}

// logChanges logs what a reload changed: the policy's mode and dry-run,
// and each Node whose fencing levels changed, with the devices before and
// after (a node that has none now is not read any more).
func (f *Fencer) logChanges(old, next *applied) {
	f.log.Info("fencer settings reloaded", "mode", next.Policy.Mode, "dryRun", next.Policy.DryRun,
		"bmcs", len(next.Inventory.Nodes()), "leaseDuration", next.LeaseDuration)
	if old.Policy.DryRun && !next.Policy.DryRun {
		f.log.Warn("dry-run is off after a reload (policy.dryRun: false): fencing acts from now on")
	}
	nodes, err := f.nodes.List(labels.Everything())
	if err != nil {
		return
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	for _, name := range names {
		before, after := old.Inventory.Levels(name), next.Inventory.Levels(name)
		if device.SameLevels(before, after) {
			continue
		}
		if len(after) == 0 {
			f.log.Warn("node removed from the fencing inventory by a reload: its power is not read any more; a taint on it stays until it recovers",
				"node", name, "before", levelNames(before))
			continue
		}
		f.log.Info("fencing levels changed by a reload", "node", name, "before", levelNames(before), "after", levelNames(after))
	}
}

// levelNames is levels for a log line: each level's plug endpoints, the
// levels separated by " | ".
func levelNames(levels [][]device.Plug) string {
	out := make([]string, 0, len(levels))
	for _, l := range levels {
		eps := make([]string, 0, len(l))
		for _, p := range l {
			eps = append(eps, p.Endpoint)
		}
		out = append(out, strings.Join(eps, "+"))
	}
	return strings.Join(out, " | ")
}

// reloadedMeanwhile is the failure of a power read or action whose node's
// levels were changed by a reload while it ran: what the old devices said
// is not evidence under the configuration now in force (the old address
// may have been the wrong machine's), so the core reads the new ones.
func reloadedMeanwhile(op string, at time.Time) *core.Failure {
	return &core.Failure{Op: op, Kind: vocab.KindReconfigured, At: at,
		Message: "the node's power devices changed in the configuration while this ran: its result is not used; the devices now configured are asked"}
}
