package fencing

import (
	"context"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
)

// Inventory is where the fencer finds each node's fencing levels: a
// *device.Inventory, built from the configuration; tests bring their own
// drivers.
type Inventory interface {
	// Nodes are the nodes with a BMC, sorted.
	Nodes() []string
	// Levels are node's fencing levels in order; nil: none.
	Levels(node string) [][]device.Plug
	// Fenceable reports whether node has at least one level.
	Fenceable(node string) bool
}

// The I/O half of fencing topology: the plugs of a level are read or
// switched in parallel, the levels one after the other, and stop at the
// first level that settles the matter; what the levels say together is
// the core's rule (core.CombineLevels).

// readLevels reads the node's levels in order until one decides. A level
// that has not answered within NextLevelAfter does not hold up the next
// one: a dark BMC would hold the read for its whole timeout (5 s an
// attempt, three attempts) while the PDU behind it could answer in a
// second, so the next level is read beside it, and the first level to
// decide ends the read (the others are cancelled). That is fencing
// topology's own rule — a level that cannot be read gives way to the next
// — with "cannot be read" judged sooner; the evidence is the deciding
// level's, as ever. Only reads overlap: power actions go one level at a
// time (powerOffLevels).
func (f *Fencer) readLevels(ctx context.Context, name string, levels [][]device.Plug) (*core.Reading, *core.Failure) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Buffered for every level: a cancelled level still running when the
	// read ends finishes on its own, nobody waits for it.
	done := make(chan core.LevelRead, len(levels))
	next, running := 0, 0
	hedge := time.NewTimer(NextLevelAfter)
	defer hedge.Stop()
	startNext := func() {
		i := next
		next++
		running++
		go func() {
			done <- f.onLevel(ctx, name, i+1, levels[i], vocab.OpPowerStatus, device.ReadPlug)
		}()
		hedge.Reset(NextLevelAfter)
	}
	startNext()
	var reads []core.LevelRead
read:
	for running > 0 {
		select {
		case lr := <-done:
			running--
			reads = append(reads, lr)
			if lr.Decides() {
				break read
			}
			if running == 0 && next < len(levels) {
				startNext()
			}
		case <-hedge.C:
			if next < len(levels) {
				f.log.Info("power read: a level has not answered yet; reading the next one beside it",
					"node", name, "level", next, "after", NextLevelAfter, "next", next+1)
				startNext()
			}
		}
	}
	slices.SortFunc(reads, func(a, b core.LevelRead) int { return a.Level - b.Level })
	return core.CombineLevels(reads)
}

// powerOffLevels switches off every plug of the first level where all of
// them can be switched off and then read off (fence_ipmilan's way: send,
// then poll until the state is reached). A level where any plug fails is
// given up for the next one: its other plugs may be off already, which is
// harmless on a node being switched off, but it is no evidence.
func (f *Fencer) powerOffLevels(ctx context.Context, name string, levels [][]device.Plug, verify device.VerifyOptions) (*core.Reading, *core.Failure) {
	var failed []core.LevelRead
	for i, plugs := range levels {
		lr := f.onLevel(ctx, name, i+1, plugs, vocab.OpPowerOff, func(ctx context.Context, b device.BMC) (vocab.PowerState, error) {
			res, err := device.PowerOffVerified(ctx, b, verify)
			return res.State, err
		})
		if !lr.Decides() {
			failed = append(failed, lr)
			continue
		}
		r, fail := core.CombineLevels([]core.LevelRead{lr})
		if r != nil {
			r.PoweredOffByFenced = true
			for i := range r.Plugs {
				r.Plugs[i].PoweredOffByFenced = true
			}
		}
		return r, fail
	}
	_, fail := core.CombineLevels(failed)
	if fail != nil {
		fail.Op, fail.Message = vocab.OpPowerOff, strings.Replace(fail.Message, "no level could be read", "no level could be switched off", 1)
	}
	return nil, fail
}

// powerOnLevels switches on every plug of the first level where all of
// them can be switched on: after a fence by a PDU the BMC is dark until
// its outlets are on again, so the levels are tried in order.
func (f *Fencer) powerOnLevels(ctx context.Context, name string, levels [][]device.Plug, verify device.VerifyOptions) *core.Failure {
	var failed []core.LevelRead
	for i, plugs := range levels {
		lr := f.onLevel(ctx, name, i+1, plugs, vocab.OpPowerOn, func(ctx context.Context, b device.BMC) (vocab.PowerState, error) {
			res, err := device.PowerOnVerified(ctx, b, verify)
			return res.State, err
		})
		if lr.Decides() {
			return nil
		}
		failed = append(failed, lr)
	}
	_, fail := core.CombineLevels(failed)
	if fail != nil {
		fail.Op, fail.Message = vocab.OpPowerOn, strings.Replace(fail.Message, "no level could be read", "no level could be switched on", 1)
	}
	return fail
}

// onLevel runs do on every plug of one level (device.OnLevel), stamping
// each reading with the kubelet heartbeat known before it was asked for
// and counting each request.
func (f *Fencer) onLevel(ctx context.Context, name string, level int, plugs []device.Plug, op string, do device.PlugOp) core.LevelRead {
	renewed := f.kubeletRenewBefore(ctx, name)
	return device.OnLevel(ctx, level, plugs, op, do, f.cfg.Now, func(_ device.Plug, r *core.Reading, err error, elapsed time.Duration) {
		if r != nil {
			r.KubeletLeaseRenewedAt = renewed
		}
		f.cfg.Metrics.bmcRequest(op, err, elapsed)
	})
}

// kubeletRenewBefore is the renew time of node's kubelet Lease as the API
// server has it now, before a power request: the line a later renewal must
// cross to void the reading (core.LifeAfter). It is read from the API, not
// the informer, because an informer can lag by a minute after an API
// outage (client-go's reflector backs off up to 30 s, with jitter): a
// renewal from before the reading that the informer had not seen yet would
// look like a sign of life after it — a false contradiction, and a fence
// held back for nothing. Taken before the request, so a renewal during it
// counts as life (the safe side). When the API server cannot be asked, the
// informer's value stands in (at worst a reading voided for nothing).
func (f *Fencer) kubeletRenewBefore(ctx context.Context, node string) time.Time {
	known := f.kubeletRenew(node)
	if f.cfg.Client == nil {
		return known
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultKubeletLeaseReadTimeout)
	defer cancel()
	renew, ok, err := f.kubeletRenewFromAPI(ctx, node)
	if err != nil || !ok || renew.Before(known) {
		return known
	}
	return renew
}

// InventoryNodes counts the Nodes the inventory gives at least one fencing
// level (from the Node informer's cache: none before it has synced). 0
// means this fencer can fence no node of the cluster: fence devices
// without a topology, or an inventory keyed by names no Node has (short
// host names for Nodes registered under their FQDN).
func (f *Fencer) InventoryNodes() int {
	nodes, err := f.nodes.List(labels.Everything())
	if err != nil {
		return 0
	}
	n, inv := 0, f.settings().Inventory
	for _, node := range nodes {
		if inv.Fenceable(node.Name) || watchdogLevel(inv, node.Name) > 0 {
			n++
		}
	}
	return n
}
