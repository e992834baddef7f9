package fencer

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"fenced.io/fenced/pkg/core"
	"fenced.io/fenced/pkg/device"
)

// The I/O half of fencing topology: the plugs of a level are read or
// switched in parallel, the levels one after the other, and stop at the
// first level that settles the matter; what the levels say together is
// the core's rule (core.CombineLevels).

// readLevels reads the node's levels in order until one decides.
func (f *Fencer) readLevels(ctx context.Context, name string, levels [][]device.Plug) (*core.Reading, *core.Failure) {
	var reads []core.LevelRead
	for i, plugs := range levels {
		lr := f.onLevel(ctx, name, i+1, plugs, core.OpPowerStatus, func(ctx context.Context, b device.BMC) (core.PowerState, error) {
			return b.PowerState(ctx)
		})
		reads = append(reads, lr)
		if lr.Decides() {
			break
		}
	}
	return core.CombineLevels(reads)
}

// powerOffLevels switches off every plug of the first level where all of
// them can be switched off and then read off (fence_ipmilan's way: send,
// then poll until the state is reached). A level where any plug fails is
// given up for the next one: its other plugs may be off already, which is
// harmless on a node being switched off, but it is no evidence.
func (f *Fencer) powerOffLevels(ctx context.Context, name string, levels [][]device.Plug) (*core.Reading, *core.Failure) {
	var failed []core.LevelRead
	for i, plugs := range levels {
		lr := f.onLevel(ctx, name, i+1, plugs, core.OpPowerOff, func(ctx context.Context, b device.BMC) (core.PowerState, error) {
			res, err := device.PowerOffVerified(ctx, b, f.cfg.Verify)
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
		fail.Op, fail.Message = core.OpPowerOff, strings.Replace(fail.Message, "no level could be read", "no level could be switched off", 1)
	}
	return nil, fail
}

// powerOnLevels switches on every plug of the first level where all of
// them can be switched on: after a fence by a PDU the BMC is dark until
// its outlets are on again, so the levels are tried in order.
func (f *Fencer) powerOnLevels(ctx context.Context, name string, levels [][]device.Plug) *core.Failure {
	var failed []core.LevelRead
	for i, plugs := range levels {
		lr := f.onLevel(ctx, name, i+1, plugs, core.OpPowerOn, func(ctx context.Context, b device.BMC) (core.PowerState, error) {
			res, err := device.PowerOnVerified(ctx, b, f.cfg.Verify)
			return res.State, err
		})
		if lr.Decides() {
			return nil
		}
		failed = append(failed, lr)
	}
	_, fail := core.CombineLevels(failed)
	if fail != nil {
		fail.Op, fail.Message = core.OpPowerOn, strings.Replace(fail.Message, "no level could be read", "no level could be switched on", 1)
	}
	return fail
}

// onLevel runs do on every plug of one level in parallel and returns what
// each gave, a reading dated with its answer (and with what the kubelet's
// heartbeat said then) or a failure. A plug that answers its power but
// fails its system GUID is not trusted this round.
func (f *Fencer) onLevel(ctx context.Context, name string, level int, plugs []device.Plug, op string,
	do func(context.Context, device.BMC) (core.PowerState, error)) core.LevelRead {
	lr := core.LevelRead{Level: level, Plugs: make([]core.PlugRead, len(plugs))}
	var wg sync.WaitGroup
	for i, p := range plugs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr := core.PlugRead{Device: p.Device, Plug: p.Plug}
			start := f.cfg.Now()
			var err error
			if p.Driver == nil {
				err = fmt.Errorf("%s: no such power device for node %s in the configuration", p.Endpoint, name)
			} else {
				var state core.PowerState
				state, err = do(ctx, p.Driver)
				if err == nil {
					r := &core.Reading{Power: state, At: f.cfg.Now(), SentAt: start, KubeletLeaseRenewedAt: f.kubeletRenew(name), Endpoint: p.Endpoint}
					if guid, gerr := p.Driver.SystemGUID(ctx); gerr == nil {
						r.SystemGUID = guid
					} else if device.KindOf(gerr) != core.KindNotSupported && op == core.OpPowerStatus {
						err = gerr
					}
					if err == nil {
						pr.Reading = r
					}
				}
			}
			f.cfg.Metrics.bmcRequest(op, err, f.cfg.Now().Sub(start))
			if err != nil {
				kind := device.KindOf(err)
				if kind == "" {
					kind = core.KindBMC
				}
				pr.Failure = &core.Failure{Op: op, Kind: kind, Message: err.Error(), At: f.cfg.Now()}
			}
			lr.Plugs[i] = pr
		}()
	}
	wg.Wait()
	return lr
}
