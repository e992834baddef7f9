package device

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"fenced.io/fenced/pkg/vocab"
)

// Shared status reads. A rack that loses power has every node of it read
// at once, each at its own outlet of the same PDU: one run of the agent
// each — a Python process and one device session, forty times over, on a
// device that often takes one session at a time. One run of the agent's
// list-status, which prints every plug with its state, answers for all of
// them instead.
//
// Only reads that ask while a run of this device is under way share one:
// they wait for the run after it, which begins after they asked. None is
// ever answered by a run that began before it asked, which could have
// read the outlet before the node's kubelet baseline was taken
// (core.LifeAfter). A read that finds the device idle runs its own status
// at once, as without sharing, so a single node's read costs nothing more.
//
// Not every agent can: ClusterLabs' SNMP agents (fence_apc_snmp,
// fence_eaton_snmp, fence_tripplite_snmp, fence_ipdu) print no state in
// list-status. A device whose list-status gave the state of none of the
// plugs asked is read plug by plug from then on — but for an APC rack PDU
// fenced reads itself (apcsnmp.go), whose batches are one SNMP GET. A
// plug list in one status run ("plug=3,4,5", fencing.py's plug_separator)
// is never used: fencing.py says off only when every plug reads off, but
// fence_apc_snmp resolves the first plug's outlet once and reads it for
// every plug of the list — off for "2,3" with outlet 3 on.

// actionListStatus is the fence agent API's list-status: every plug with
// its alias and its state, one per line ("3,worker-3,OFF").
const actionListStatus = "list-status"

// statusBatch is the reads waiting for the device's next run.
type statusBatch struct {
	reads []plugRead
	done  chan struct{}
	// Set before done is closed, by plug.
	states map[string]vocab.PowerState
	errs   map[string]error
}

// plugRead is one node's read of one plug.
type plugRead struct{ node, plug string }

// sharedStatus reads plug for node, sharing a run of the agent with the
// reads of other plugs of this device that ask while a run is under way.
func (a *FenceAgent) sharedStatus(ctx context.Context, node, plug string) (vocab.PowerState, error) {
	a.mu.Lock()
	shares := (a.canListStatus || a.snmp != nil) && plug != ""
	if !shares || !a.busy {
		if shares {
			a.busy = true
		}
		a.mu.Unlock()
		state, err := a.statusOne(ctx, node, plug)
		if shares {
			a.runNext()
		}
		return state, err
	}
	b := a.next
	if b == nil {
		b = &statusBatch{done: make(chan struct{})}
		a.next = b
	}
	b.reads = append(b.reads, plugRead{node: node, plug: plug})
	a.mu.Unlock()
	select {
	case <-b.done:
		if err := b.errs[plug]; err != nil {
			return vocab.PowerUnknown, err
		}
		return b.states[plug], nil
	case <-ctx.Done():
		return vocab.PowerUnknown, a.failPlug(node, plug, vocab.OpPowerStatus, vocab.KindTimeout,
			fmt.Errorf("waiting for the device's next run: %w", context.Cause(ctx)), nil)
	}
}

// runNext starts the batch that waited for the run that just ended, or
// marks the device idle.
func (a *FenceAgent) runNext() {
	a.mu.Lock()
	b := a.next
	a.next = nil
	if b == nil {
		a.busy = false
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	go func() {
		a.runBatch(b)
		close(b.done)
		a.runNext()
	}()
}

// runBatch reads every plug of b: one SNMP GET for the outlets fenced
// reads itself (nativeStatus), else one list-status run for them all, the
// plain status for a plug alone or one neither reports on or off. The
// runs are bounded by the agent's own timeout and retries, not by any one
// reader, who may stop waiting (its read cancelled) without stopping the
// others'.
func (a *FenceAgent) runBatch(b *statusBatch) {
	ctx := context.Background()
	b.states, b.errs = map[string]vocab.PowerState{}, map[string]error{}
	slices.SortFunc(b.reads, func(x, y plugRead) int { return strings.Compare(x.plug, y.plug) })
	reads := slices.CompactFunc(b.reads, func(x, y plugRead) bool { return x.plug == y.plug })
	listed, native, handled := a.nativeStatus(ctx, reads)
	for plug, err := range native {
		b.errs[plug] = err
	}
	a.mu.Lock()
	canListStatus := a.canListStatus
	a.mu.Unlock()
	if !handled && canListStatus && len(reads) > 1 {
		var err error
		listed, err = a.listStatus(ctx)
		switch k := KindOf(err); {
		case k == vocab.KindTimeout || k == vocab.KindUnreachable || k == vocab.KindAuth:
			// The device itself: each plug alone would fail the same way,
			// one timeout after another.
			for _, r := range reads {
				b.errs[r.plug] = a.failPlug(r.node, r.plug, vocab.OpPowerStatus, k,
					fmt.Errorf("%s for %d plugs: %w", actionListStatus, len(reads), causeOf(err)), nil)
			}
			return
		case err == nil && !slices.ContainsFunc(reads, func(r plugRead) bool { _, ok := listed[r.plug]; return ok }):
			// No state for any plug asked: this agent prints none (or
			// names the plugs otherwise). Plug by plug from now on.
			a.mu.Lock()
			a.canListStatus = false
			a.mu.Unlock()
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range reads {
		if s, ok := listed[r.plug]; ok {
			b.states[r.plug] = s
			continue
		}
		if _, failed := b.errs[r.plug]; failed {
			continue
		}
		wg.Go(func() {
			s, err := a.status(ctx, r.node, r.plug)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				b.errs[r.plug] = err
			} else {
				b.states[r.plug] = s
			}
		})
	}
	wg.Wait()
}

// listStatus runs list-status and returns the plugs it reports on or off,
// by outlet ID and by alias (parseListStatus).
func (a *FenceAgent) listStatus(ctx context.Context) (map[string]vocab.PowerState, error) {
	res, secrets, err := a.run(ctx, a.opts.Node, vocab.OpPowerStatus, actionListStatus, "")
	if err != nil {
		return nil, err
	}
	if res.exit != 0 {
		return nil, a.fail(vocab.OpPowerStatus, classifyAgent(res.stderr), res.failure(actionListStatus), secrets)
	}
	return parseListStatus(res.stdout, cmp.Or(a.opts.Options["separator"], ",")), nil
}

// parseListStatus reads fencing.py's list-status output, "ID<sep>alias<sep>STATE"
// lines (an alias may hold the separator, the ID and the state never do),
// into states by outlet ID and by alias — an alias only when no other
// outlet has it and it is no outlet's ID, as configurations may name plugs
// either way. Lines of another shape, and states other than ON and OFF,
// are left out (their plugs are read one by one); an ID listed twice
// leaves everything out.
func parseListStatus(out []byte, sep string) map[string]vocab.PowerState {
	byID := map[string]vocab.PowerState{}
	byAlias := map[string]vocab.PowerState{}
	aliasCount := map[string]int{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Split(strings.TrimSpace(line), sep)
		if len(fields) < 3 || fields[0] == "" {
			continue
		}
		var state vocab.PowerState
		switch strings.ToUpper(fields[len(fields)-1]) {
		case "ON":
			state = vocab.PowerOn
		case "OFF":
			state = vocab.PowerOff
		default:
			continue
		}
		id, alias := fields[0], strings.Join(fields[1:len(fields)-1], sep)
		if _, twice := byID[id]; twice {
			return map[string]vocab.PowerState{}
		}
		byID[id] = state
		if alias != "" {
			aliasCount[alias]++
			byAlias[alias] = state
		}
	}
	states := map[string]vocab.PowerState{}
	for alias, s := range byAlias {
		if _, isID := byID[alias]; aliasCount[alias] == 1 && !isID {
			states[alias] = s
		}
	}
	maps.Copy(states, byID)
	return states
}

// causeOf is what an *Error says went wrong, without the device it names
// (the caller names it again, with the node and plug).
func causeOf(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Err != nil {
		return e.Err
	}
	return err
}
