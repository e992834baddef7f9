package fencing

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// Device monitoring (Pacemaker's monitor operation): every power device
// of every node is checked on a schedule, so that a dead PDU or a changed
// password is found while the node is healthy, not in the outage that
// needs the device.

// monitorConcurrency bounds the device checks in flight at once: a
// fencer with 200 BMCs must not open 200 sessions in one burst.
const monitorConcurrency = 4

// monitorDevices checks the devices every MonitorInterval, ±10 %, the
// first round after a random tenth of it, so fencers started together do
// not check in step.
func (f *Fencer) monitorDevices(ctx context.Context) {
	interval := f.cfg.MonitorInterval
	if interval <= 0 {
		return
	}
	timer := time.NewTimer(rand.N(interval/10 + 1))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		f.monitorRound(ctx)
		timer.Reset(interval - interval/10 + rand.N(interval/5+1))
	}
}

// monitorRound checks each device of every Node's levels once (a PDU that
// feeds forty nodes is asked once), then sets each node's ready levels and
// says so when a node has none left, or has one again.
func (f *Fencer) monitorRound(ctx context.Context) {
	nodes, err := f.nodes.List(labels.Everything())
	if err != nil {
		f.log.Error("device monitor: listing Nodes", "err", err)
		return
	}
	// The round runs on the settings in force at its start, to its end.
	settings, release := f.hold()
	defer release()
	levels := map[string][][]device.Plug{}
	devices := map[string]device.Plug{}
	for _, n := range nodes {
		ls := settings.Inventory.Levels(n.Name)
		if len(ls) == 0 {
			continue
		}
		levels[n.Name] = ls
		for _, l := range ls {
			for _, p := range l {
				if _, seen := devices[p.Key]; !seen {
					devices[p.Key] = p
				}
			}
		}
	}

	down := f.checkDevices(ctx, devices)
	if ctx.Err() != nil {
		return
	}
	for key := range devices {
		up := 1.0
		if _, bad := down[key]; bad {
			up = 0
		}
		f.cfg.Metrics.DeviceUp.WithLabelValues(key).Set(up)
	}
	// A device a reload removed is not checked any more: its series goes,
	// rather than staying at what it last was.
	for key := range f.monitored {
		if _, ok := devices[key]; !ok {
			f.cfg.Metrics.DeviceUp.DeleteLabelValues(key)
		}
	}
	f.monitored = devices

	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	f.checkInventory(ctx, byName, levels)
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, ls := range levels {
		ready, why := 0, make([]string, 0, len(ls))
		for i, l := range ls {
			var broken []string
			for _, p := range l {
				if err, bad := down[p.Key]; bad {
					broken = append(broken, fmt.Sprintf("%s: %v", p.Endpoint, err))
				}
			}
			if len(broken) == 0 {
				ready++
			} else {
				why = append(why, fmt.Sprintf("level %d: %s", i+1, strings.Join(broken, "; ")))
			}
		}
		f.cfg.Metrics.LevelsReady.WithLabelValues(name).Set(float64(ready))
		was, known := f.fenceable[name]
		f.fenceable[name] = ready > 0
		switch {
		case ready == 0 && (was || !known):
			msg := "this node cannot be fenced automatically: no fencing level answers (" + strings.Join(why, " | ") +
				"); if it fails now, it stays down until a person runs fenced confirm"
			f.log.Error("device monitor: node cannot be fenced automatically", "node", name, "levels", strings.Join(why, " | "))
			f.cfg.Recorder.Event(byName[name], corev1.EventTypeWarning, string(vocab.EventCannotBeFencedAutomatically), msg)
		case ready > 0 && known && !was:
			f.log.Info("device monitor: node can be fenced again", "node", name, "levelsReady", ready)
			f.cfg.Recorder.Event(byName[name], corev1.EventTypeNormal, string(vocab.EventFenceDevicesAnswer),
				fmt.Sprintf("%d of %d fencing levels answer again: this node can be fenced automatically", ready, len(ls)))
		}
	}
	for name := range f.fenceable {
		if _, ok := levels[name]; !ok {
			delete(f.fenceable, name)
			f.cfg.Metrics.LevelsReady.DeleteLabelValues(name)
		}
	}
}

// checkDevices runs every device's monitor check, monitorConcurrency at a
// time, and returns the failures by device key.
func (f *Fencer) checkDevices(ctx context.Context, devices map[string]device.Plug) map[string]error {
	keys := make([]string, 0, len(devices))
	for k := range devices {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var mu sync.Mutex
	down := map[string]error{}
	var jobs []func()
	for _, k := range keys {
		p := devices[k]
		if p.Monitor == nil {
			down[k] = fmt.Errorf("not configured")
			continue
		}
		jobs = append(jobs, func() {
			start := f.cfg.Now()
			err := p.Monitor(ctx)
			f.cfg.Metrics.bmcRequest(opMonitor, err, f.cfg.Now().Sub(start))
			if err != nil {
				mu.Lock()
				down[k] = err
				mu.Unlock()
			}
		})
	}
	inParallel(ctx, jobs)
	return down
}

// inParallel runs jobs, monitorConcurrency at a time, and returns once
// every job it started has ended; after ctx ends it starts no more.
func inParallel(ctx context.Context, jobs []func()) {
	sem := make(chan struct{}, monitorConcurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, job := range jobs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			job()
		}()
	}
}

// opMonitor labels the monitor's requests in fenced_bmc_requests_total.
const opMonitor = device.OpMonitor

// checkInventory reads, once per round, the levels of every node that is
// Ready and under no suspicion, and raises a safety alarm when a whole
// level reads off while the node's agent proves it is alive after that
// reading: the level's plugs do not feed this node (a mislabelled outlet,
// a BMC address of another machine). Found now, before an outage, rather
// than when a false gossip death makes the fencer read it. The alarm is
// raised once per node until its levels read as they should again. A node
// whose agent does not answer is left to the decision core: it may have
// just lost its power.
func (f *Fencer) checkInventory(ctx context.Context, nodes map[string]*corev1.Node, levels map[string][][]device.Plug) {
	var jobs []func()
	for name, ls := range levels {
		if n := nodes[name]; n != nil && name != f.cfg.Identity && f.quietAndReady(n) {
			jobs = append(jobs, func() { f.checkNodeLevels(ctx, n, ls) })
		}
	}
	inParallel(ctx, jobs)
}

// quietAndReady reports whether n is Ready, carries no fenced taint, and
// this fencer suspects nothing of it.
func (f *Fencer) quietAndReady(n *corev1.Node) bool {
	if ready, _ := readyCondition(n); ready != core.ReadyTrue || taint.AppliedByFenced(n) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.phaseOf(n.Name)
	return p == core.PhaseHealthy || p == ""
}

// checkNodeLevels is checkInventory for one node.
func (f *Fencer) checkNodeLevels(ctx context.Context, n *corev1.Node, levels [][]device.Plug) {
	var off *core.Reading
	for i, plugs := range levels {
		// Counted as the monitor's requests, not as reads of a suspect.
		lr := device.OnLevel(ctx, i+1, plugs, vocab.OpPowerStatus, device.ReadPlug, f.cfg.Now,
			func(_ device.Plug, _ *core.Reading, err error, elapsed time.Duration) {
				f.cfg.Metrics.bmcRequest(opMonitor, err, elapsed)
			})
		r, _ := core.CombineLevels([]core.LevelRead{lr})
		if r != nil && r.Power == vocab.PowerOff {
			off = r
			break
		}
	}
	if off == nil {
		f.mu.Lock()
		if s, ok := f.state[n.Name]; ok {
			s.misfed = false
		}
		f.mu.Unlock()
		return
	}
	addr := f.agentAddr(n)
	if addr == "" {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.ChallengeTimeout)
	proof, err := f.cfg.Members.Challenge(cctx, n.Name, addr)
	cancel()
	if err != nil {
		f.log.Info("device monitor: a level of a Ready node reads off and its agent does not answer: left to the decision core",
			"node", n.Name, "source", off.Endpoint, "err", err)
		return
	}
	f.mu.Lock()
	s := f.stateOf(n.Name)
	alarmed := s.misfed
	s.misfed = true
	f.mu.Unlock()
	if alarmed {
		return
	}
	msg := fmt.Sprintf("SAFETY: fencing level %d (%s) reads power off at %s, but the node is Ready and its agent answered a liveness challenge after that reading (boot %s): the device or plug in the configuration does not feed this node. If the node fails, this level cannot be trusted; fix the inventory.",
		max(off.Level, 1), off.Endpoint, off.At.UTC().Format(time.RFC3339Nano), proof.BootID)
	f.cfg.Metrics.SafetyAlarms.WithLabelValues(string(vocab.EventPowerDeviceReadsOffLiveNode)).Inc()
	f.log.Error("SAFETY ALARM", "node", n.Name, "reason", vocab.EventPowerDeviceReadsOffLiveNode, "message", msg)
	f.cfg.Recorder.Event(n, corev1.EventTypeWarning, string(vocab.EventPowerDeviceReadsOffLiveNode), msg)
}
