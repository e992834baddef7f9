package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/internal/testbed/soak"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// The randomized phase of `make soak`: one harness, faults of every kind in
// random order and overlapping, each followed by its recovery, for
// SOAK_DURATION, while soak.Checker watches every Node and power Lease.
// Without SOAK_DURATION it is a smoke run of a few faults, with
// FENCED_SOAK_SMOKE=1 (make soak-smoke, ~2 min); otherwise it skips.
// Environment:
//
//	SOAK_DURATION      how long faults are injected (default: the smoke run)
//	FENCED_SOAK_SMOKE  run the smoke run
//	SOAK_SEED      the RNG seed, to replay a run (default: from the clock)
//	SOAK_REPORT    a file for the summary table (default: none)

// soakMachines: two fencers in power-off mode as in TestPowerOffFencing, five
// workers. cp-1 is never restarted and w-5 never switched off, so that
// their agents run from the warm-up to the end and show any leak.
var soakMachines = []string{"cp-1", "cp-2", "w-1", "w-2", "w-3", "w-4", "w-5"}

// soakPolicy is TestPowerOffFencing's: a hung or isolated worker is
// switched off once it has been gone 5 s and the fence delay is over, and
// switched on again once its volumes are released.
const soakPolicy = `{mode: power-off, fenceAfter: 5s, fenceDelay: 10s, maxUnhealthy: "30%", afterFence: "on"}`

// soakPlan: at most two workers faulted at once — 2 of 7 is within
// maxUnhealthy 30 %, so the storm guard leaves power actions on.
func soakPlan(smoke bool) soak.Plan {
	switchable := []string{"w-1", "w-2", "w-3", "w-4"}
	workers := append(slices.Clone(switchable), "w-5")
	p := soak.Plan{
		Targets: map[soak.Kind][]string{
			soak.PowerLoss: switchable, soak.Hang: switchable, soak.Isolate: switchable, soak.CleanShutdown: switchable,
			soak.PartitionAPI: workers, soak.PartitionPeers: workers, soak.BMCDown: workers, soak.BMCWrongPassword: workers,
			soak.FencerRestart: {"cp-2"},
		},
		Weights:       map[soak.Kind]int{soak.PowerLoss: 3, soak.Hang: 2, soak.CleanShutdown: 2},
		MaxConcurrent: 2,
		MinHold:       10 * time.Second, MaxHold: 90 * time.Second,
		MaxGap: 20 * time.Second,
	}
	if smoke {
		// A power loss (tainted, switched on, untainted), a partition
		// healed and a fencer restart, overlapping.
		p.MinHold, p.MaxHold, p.MaxGap = 5*time.Second, 15*time.Second, 5*time.Second
		p.First = []soak.Kind{soak.PowerLoss, soak.PartitionAPI, soak.FencerRestart}
	}
	return p
}

// Deadlines, generous for a loaded 2-core machine: a power loss is tainted
// within seconds and a machine switched on again is Ready within seconds
// (BootDelay), but a hung or isolated one waits out NotReady (50 s),
// fenceAfter and the fence delay before fenced switches it off.
const (
	soakFenceDeadline    = 3 * time.Minute
	soakRecoveryDeadline = 5 * time.Minute
	soakStatusEvery      = 30 * time.Second
	soakSampleEvery      = 10 * time.Second
	soakSmokeDuration    = 60 * time.Second
	soakSmokeFaults      = 3 // soakPlan.First
)

func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip(harness.SkipShortMessage)
	}
	duration, smoke := soakSmokeDuration, true
	if os.Getenv("SOAK_DURATION") == "" && os.Getenv("FENCED_SOAK_SMOKE") == "" {
		// ~2 min on the serial end-to-end package, the long pole of make
		// test; the scheduler and the checker are unit-tested in
		// internal/testbed/soak on every run.
		t.Skip("the soak's smoke run: make soak-smoke (FENCED_SOAK_SMOKE=1), or make soak")
	}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		must(t, err)
		duration, smoke = d, false
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		must(t, err)
		seed = s
	}
	t.Logf("soak: seed %d (replay with SOAK_SEED=%d), %s of faults%s", seed, seed, duration, map[bool]string{true: " (smoke run)"}[smoke])

	ctx, cancel := context.WithTimeout(context.Background(), duration+30*time.Minute)
	t.Cleanup(cancel)
	h := harness.Start(ctx, t, harness.Options{
		Machines: soakMachines,
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1", "cp-2"}, Policy: soakPolicy},
	})
	d := newSoakDriver(ctx, t, h, soak.NewScheduler(soakPlan(smoke), seed))
	d.startInformers()
	// Workloads to keep the data-safety checker busy: each StatefulSet may
	// run on any worker and moves whenever its machine is fenced.
	workers := []string{"w-1", "w-2", "w-3", "w-4", "w-5"}
	for i, ns := range []string{"soak-a", "soak-b"} {
		first := workers[2*i]
		sts, _ := startWorkload(ctx, t, h, ns, first, slices.DeleteFunc(slices.Clone(workers), func(w string) bool { return w == first })...)
		d.volumes = append(d.volumes, sts.PV)
	}

	d.start = time.Now() // the faults begin; logs count from here
	d.background(d.sampleAgents)
	d.background(func() { d.status(duration) })
	defer d.stop()

	// Warm-up: a tenth of the run (at least a fault or two) before the
	// agents' levels are taken, at rest, as the baseline.
	warmup := max(duration/10, 20*time.Second)
	if smoke {
		warmup = 0
	}
	// rest: at rest before the agents' levels are read.
	maxFaults, rest := 0, 20*time.Second
	if smoke {
		maxFaults, rest = soakSmokeFaults, 5*time.Second
	}
	// The faults of the warm-up recover before the levels are read; the
	// run's faults end duration after the first one, whatever that took.
	end := d.start.Add(duration)
	d.inject(d.start.Add(warmup), maxFaults)
	d.quiesce("warm-up", rest)
	warm := d.levels()
	d.inject(end, maxFaults)
	d.quiesce("end", rest)
	last := d.levels()

	s := d.summary(seed, duration, warm, last)
	var b bytes.Buffer
	s.Write(&b)
	t.Logf("soak summary:\n%s", b.String())
	if path := os.Getenv("SOAK_REPORT"); path != "" {
		must(t, os.WriteFile(path, b.Bytes(), 0o644))
	}
	if s.Failed() {
		t.Fatalf("soak: %d invariant violations (seed %d)", len(s.Violations), seed)
	}
}

// soakDriver applies the Scheduler's faults to the harness and recovers
// from them, and keeps what soak.Summary needs.
type soakDriver struct {
	ctx     context.Context
	cancel  context.CancelFunc
	bg      sync.WaitGroup // sampleAgents and status
	t       *testing.T
	h       *harness.Harness
	sched   *soak.Scheduler
	checker *soak.Checker
	volumes []string
	start   time.Time

	mu           sync.Mutex
	shuttingDown map[string]bool // between Shutdown and power on
	faults       map[soak.Kind]int
	fenceTimes   soak.Durations
	returnTimes  soak.Durations
	injected     int // fencer restarts
	restarts     int // agent processes replaced without a new boot
	agents       map[string]agentSample
	overlaps     map[string]int // data-safety overlaps reported, by volume
	wg           sync.WaitGroup
}

// agentSample is one reading of a machine's agent.
type agentSample struct {
	boot       string
	started    float64 // process_start_time_seconds
	goroutines float64
	rss        float64
}

func newSoakDriver(ctx context.Context, t *testing.T, h *harness.Harness, sched *soak.Scheduler) *soakDriver {
	ctx, cancel := context.WithCancel(ctx)
	d := &soakDriver{ctx: ctx, cancel: cancel, t: t, h: h, sched: sched, start: time.Now(),
		shuttingDown: map[string]bool{}, faults: map[soak.Kind]int{}, agents: map[string]agentSample{}, overlaps: map[string]int{}}
	d.checker = soak.NewChecker(d.live)
	return d
}

// live is the checker's oracle: the machine runs the boot the evidence is
// about and is not shutting down cleanly. A machine switched on again runs
// its new launcher a moment before it has written its boot ID: which boot
// runs is known once the boot file names the running launcher
// (Machine.RunningBoot), not after a pause guessed long enough.
func (d *soakDriver) live(node string, ev core.Evidence) (bool, string) {
	m := d.h.Machine(node)
	var boot string
	var pid int
	err := poll.UntilContext(d.ctx, 50*time.Millisecond, podTimeout, func(context.Context) bool {
		var known bool
		boot, pid, known = m.RunningBoot()
		return known
	})
	if err != nil || boot == "" || boot != ev.BootID {
		return false, ""
	}
	d.mu.Lock()
	down := d.shuttingDown[node]
	d.mu.Unlock()
	if down && ev.Method == vocab.EvidenceCleanShutdown {
		return false, ""
	}
	return true, fmt.Sprintf("machine process %d runs boot %s (shutting down: %v)", pid, ev.BootID, down)
}

// background runs f until stop.
func (d *soakDriver) background(f func()) { d.bg.Go(f) }

// stop ends the background work before the test returns: nothing may log
// after it.
func (d *soakDriver) stop() {
	d.cancel()
	d.bg.Wait()
}

func (d *soakDriver) startInformers() { watchInvariants(d.t, d.h, d.checker) }

// inject starts faults until the deadline (or maxFaults, if not 0) and
// returns once every one of them has recovered.
func (d *soakDriver) inject(until time.Time, maxFaults int) {
	for time.Now().Before(until) && d.ctx.Err() == nil {
		if maxFaults > 0 && d.total() >= maxFaults {
			break
		}
		f, ok := d.sched.Next()
		if !ok {
			time.Sleep(time.Second)
			continue
		}
		d.mu.Lock()
		d.faults[f.Kind]++
		d.mu.Unlock()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer d.sched.Done(f)
			d.run(f)
		}()
		time.Sleep(d.sched.Gap())
	}
	d.wg.Wait()
}

func (d *soakDriver) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.faults {
		n += c
	}
	return n
}

func (d *soakDriver) logf(format string, args ...any) {
	d.t.Logf("soak %7s "+format, append([]any{time.Since(d.start).Round(time.Second).String()}, args...)...)
}

// run applies one fault, holds it, and recovers from it.
func (d *soakDriver) run(f soak.Fault) {
	m := d.h.Machine(f.Machine)
	t0 := time.Now()
	d.logf("inject  %s, hold %s", f, f.Hold.Round(time.Second)) // a fencer restart's hold spaces the next one
	var err error
	switch f.Kind {
	case soak.PowerLoss:
		err = m.PowerLoss()
	case soak.CleanShutdown:
		d.mu.Lock()
		d.shuttingDown[m.Name] = true
		d.mu.Unlock()
		err = m.Shutdown(d.ctx)
	case soak.Hang:
		err = m.Hang()
	case soak.PartitionAPI:
		err = m.PartitionFromAPI()
	case soak.PartitionPeers:
		err = m.PartitionFromPeers()
	case soak.Isolate:
		err = m.Isolate()
	case soak.BMCDown:
		m.BMCDown()
	case soak.BMCWrongPassword:
		err = m.BMCWrongPassword()
	case soak.FencerRestart:
		d.mu.Lock()
		d.injected++
		d.mu.Unlock()
		err = m.RestartAgent()
	}
	if err != nil {
		d.t.Errorf("soak: %s: %v", f, err)
		return
	}
	if f.Kind == soak.PowerLoss || f.Kind == soak.CleanShutdown {
		// The machine is off (or on its way): it must be tainted, with
		// evidence, before anything else happens to it.
		if at, ok := d.waitTainted(m.Name, t0); ok {
			d.mu.Lock()
			d.fenceTimes = append(d.fenceTimes, at.Sub(t0))
			d.mu.Unlock()
			d.logf("tainted %s after %.1f s", f, at.Sub(t0).Seconds())
		} else {
			d.checker.Violate(soak.PowerLossNotFenced, m.Name, fmt.Sprintf("%s: no taint %s after it", f, soakFenceDeadline))
		}
	}
	if f.Kind == soak.CleanShutdown {
		// logind switches the machine off once the delay locks are
		// released (InhibitDelayMax at most).
		if err := m.WaitPower(d.ctx, "off", 2*time.Minute); err != nil {
			d.t.Errorf("soak: %s: %v", f, err)
		}
	}
	d.sleep(f.Hold)
	if at, ok := d.checker.TaintedAfter(m.Name, t0); ok && f.Kind != soak.PowerLoss && f.Kind != soak.CleanShutdown {
		// A hung or cut-off machine that fenced switched off.
		d.logf("tainted %s after %.1f s (fenced switched it off)", f, at.Sub(t0).Seconds())
	}
	d.recover(f, m)
}

// waitTainted waits until node's taint appeared at or after since.
func (d *soakDriver) waitTainted(node string, since time.Time) (time.Time, bool) {
	var at time.Time
	err := wait.PollUntilContextTimeout(d.ctx, 100*time.Millisecond, soakFenceDeadline, true, func(context.Context) (bool, error) {
		var ok bool
		at, ok = d.checker.TaintedAfter(node, since)
		return ok, nil
	})
	return at, err == nil
}

// recover undoes f, switches the machine on if it is off (fenced may have
// switched it off, and with afterFence: on switches it on itself), and
// waits until its Node is Ready without the taint.
func (d *soakDriver) recover(f soak.Fault, m *harness.Machine) {
	var err error
	switch f.Kind {
	case soak.Hang:
		err = m.Resume()
	case soak.PartitionAPI, soak.PartitionPeers, soak.Isolate:
		err = m.Heal()
	case soak.BMCDown:
		m.BMCUp()
	case soak.BMCWrongPassword:
		err = m.RestoreBMCPassword()
	case soak.FencerRestart:
		// The new agent must be up: it serves metrics once it runs.
		err = wait.PollUntilContextTimeout(d.ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			_, err := m.Metrics()
			return err == nil, nil
		})
	}
	if err != nil && !strings.Contains(err.Error(), "is not running") { // Resume of a machine fenced switched off
		d.t.Errorf("soak: recovering from %s: %v", f, err)
	}
	t1 := time.Now()
	var switchedOn time.Time
	if state, err := m.BMC.ToolPowerState(); err == nil && state == "off" {
		if err := m.PowerOnViaBMC(); err != nil {
			d.t.Errorf("soak: switching %s on after %s: %v", m.Name, f, err)
		}
		switchedOn = time.Now()
	}
	d.mu.Lock()
	delete(d.shuttingDown, m.Name)
	d.mu.Unlock()
	if err := d.waitHealthy(m.Name); err != nil {
		d.checker.Violate(soak.TaintLeftBehind, m.Name, fmt.Sprintf("%s: %v", f, err))
		d.logf("STUCK   %s: %v", f, err)
		return
	}
	if !switchedOn.IsZero() {
		if at, ok := d.checker.UntaintedAfter(m.Name, switchedOn); ok {
			d.mu.Lock()
			d.returnTimes = append(d.returnTimes, at.Sub(switchedOn))
			d.mu.Unlock()
		}
	}
	d.logf("healthy %s, %.1f s after its recovery began", f, time.Since(t1).Seconds())
}

// waitHealthy waits until node is Ready and untainted.
func (d *soakDriver) waitHealthy(node string) error {
	var n *corev1.Node
	err := wait.PollUntilContextTimeout(d.ctx, 250*time.Millisecond, soakRecoveryDeadline, true, func(ctx context.Context) (bool, error) {
		var err error
		n, err = d.h.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && harness.NodeReady(n) == corev1.ConditionTrue && !taint.HasTaint(n), nil
	})
	if err != nil {
		return fmt.Errorf("not Ready and untainted %s after its recovery (Ready %s, tainted %v, taints %s)",
			soakRecoveryDeadline, harness.NodeReady(n), taint.HasTaint(n), taintKeys(n))
	}
	return nil
}

func (d *soakDriver) sleep(dur time.Duration) {
	select {
	case <-d.ctx.Done():
	case <-time.After(dur):
	}
}

// quiesce waits, with no fault active, until every Node is Ready and
// untainted and the agents have settled for rest, before a reading of
// their levels.
func (d *soakDriver) quiesce(what string, rest time.Duration) {
	d.logf("%s: every fault recovered; waiting for all nodes Ready and untainted, then %s at rest", what, rest)
	for _, m := range d.h.Machines {
		if err := d.waitHealthy(m.Name); err != nil {
			d.checker.Violate(soak.TaintLeftBehind, m.Name, what+": "+err.Error())
		}
	}
	d.sleep(rest)
	d.checkVolumes()
}

// checkVolumes runs the data-safety checker on every workload's volume; a
// new overlap is a violation.
func (d *soakDriver) checkVolumes() {
	for _, pv := range d.volumes {
		r, err := d.h.CheckVolume(pv)
		if err != nil {
			d.t.Errorf("soak: checking %s: %v", pv, err)
			continue
		}
		d.mu.Lock()
		seen := d.overlaps[pv]
		d.overlaps[pv] = len(r.Overlaps)
		d.mu.Unlock()
		for _, o := range r.Overlaps[seen:] {
			d.checker.Violate(soak.OverlappingWriters, o.Old.Node, fmt.Sprintf("volume %s: %v wrote %d records after %v started", pv, o.Old, o.Count, o.New))
		}
	}
}

// sampleAgents reads every agent's metrics every soakSampleEvery and counts
// agent processes replaced without a new boot of their machine.
func (d *soakDriver) sampleAgents() {
	for d.ctx.Err() == nil {
		for name, s := range d.readAgents() {
			d.mu.Lock()
			prev, ok := d.agents[name]
			if ok && prev.boot == s.boot && prev.started != s.started {
				d.restarts++
				d.logf("agent of %s restarted (same boot %s)", name, s.boot)
			}
			d.agents[name] = s
			d.mu.Unlock()
		}
		d.sleep(soakSampleEvery)
	}
}

// readAgents reads the metrics of every agent that answers, in parallel (a
// hung or cut-off machine does not answer for the client's 5 s).
func (d *soakDriver) readAgents() map[string]agentSample {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]agentSample{}
	for _, m := range d.h.Machines {
		wg.Go(func() {
			boot := m.BootID()
			text, err := m.Metrics()
			if err != nil {
				return
			}
			s := agentSample{boot: boot,
				started:    metricIn(text, "process_start_time_seconds"),
				goroutines: metricIn(text, "go_goroutines"),
				rss:        metricIn(text, "process_resident_memory_bytes")}
			if m.BootID() != boot || s.started == 0 {
				return // rebooted while read
			}
			mu.Lock()
			out[m.Name] = s
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// levels is the median of three readings 5 s apart of every agent.
func (d *soakDriver) levels() map[string][]agentSample {
	out := map[string][]agentSample{}
	for i := range 3 {
		if i > 0 {
			d.sleep(5 * time.Second)
		}
		for name, s := range d.readAgents() {
			out[name] = append(out[name], s)
		}
	}
	return out
}

func (d *soakDriver) status(duration time.Duration) {
	tick := time.NewTicker(soakStatusEvery)
	defer tick.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-tick.C:
		}
		d.checkVolumes()
		d.mu.Lock()
		restarts := d.restarts
		d.mu.Unlock()
		tainted := d.checker.Tainted()
		slices.Sort(tainted)
		d.logf("status: %s in (faults for %s), %d faults injected, faulted now %v, tainted now %v, %d taints with evidence, %d agent restarts, %d violations",
			time.Since(d.start).Round(time.Second), duration, d.total(), d.sched.Busy(), tainted, d.checker.TaintsWithEvidence(), restarts, len(d.checker.Violations()))
	}
}

func (d *soakDriver) summary(seed uint64, duration time.Duration, warm, end map[string][]agentSample) soak.Summary {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := soak.Summary{Seed: seed, Duration: duration, Machines: len(d.h.Machines), Faults: d.faults,
		TaintsWithEvidence: d.checker.TaintsWithEvidence(), Violations: d.checker.Violations(),
		FenceTimes: d.fenceTimes, ReturnTimes: d.returnTimes, AgentRestarts: d.restarts, InjectedRestarts: d.injected}
	for _, m := range d.h.Machines {
		w, e := warm[m.Name], end[m.Name]
		a := soak.Agent{Machine: m.Name}
		if len(w) > 0 && len(e) > 0 {
			a.Continuous = w[0].boot == e[len(e)-1].boot && w[0].started == e[len(e)-1].started
			a.Goroutines = soak.Level{Warm: medianOf(w, func(s agentSample) float64 { return s.goroutines }), End: medianOf(e, func(s agentSample) float64 { return s.goroutines })}
			a.RSS = soak.Level{Warm: medianOf(w, func(s agentSample) float64 { return s.rss }), End: medianOf(e, func(s agentSample) float64 { return s.rss })}
		}
		s.Agents = append(s.Agents, a)
	}
	return s
}

func medianOf(samples []agentSample, f func(agentSample) float64) float64 {
	v := make([]float64, len(samples))
	for i, s := range samples {
		v[i] = f(s)
	}
	return median(v)
}

// metricIn reads one unlabelled series from a /metrics text (0 if absent).
func metricIn(text, series string) float64 {
	v, _ := seriesValue(text, series)
	return v
}
