package gossip

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"fenced.io/fenced/pkg/config"
)

// Options are one measurement: a ring of Size members with one profile's
// timings.
type Options struct {
	Size    int
	Profile config.GossipProfile
	// Kills is how many members are crashed in all (>= 20 for p99 to mean
	// something); KillBatch at once, spaced by KillSpacing. Each batch is
	// replaced by new members before the next, so the ring keeps its size.
	Kills, KillBatch int
	KillSpacing      time.Duration
	// Rest is how long each window at rest lasts: no loss, each of Losses,
	// and with Hogs busy goroutines (CPU starvation; 0 skips it).
	Rest   time.Duration
	Losses []float64
	Hogs   int
	// Settle is how long the formed ring is left alone before the first
	// window, for the join's gossip to die down.
	Settle time.Duration
	// BuildTimeout bounds the forming of the ring (0: 10 minutes): where
	// the process cannot host Size members, Run says how far it got.
	BuildTimeout time.Duration
	// Dilation (>= 1; 0 means 1) stretches every memberlist timer of
	// every member by this factor — probe interval and timeout, gossip
	// and push/pull intervals, TCP deadlines — so that the machine does
	// 1/Dilation of the work per second while the protocol goes through
	// the same steps in the same order: a ring too big for the machine at
	// full speed (hundreds of members on 2 cores) can still be measured.
	// Rest, KillSpacing and Settle are in the protocol's time, and every
	// figure of the Result but Build is converted back to it: durations
	// divided by Dilation, packets, bytes and CPU per second multiplied by
	// it. What it cannot preserve is the ratio of the network's and the
	// scheduler's latency to the timers (both shrink by Dilation): fine on
	// a LAN, where they are far below the probe timeout.
	Dilation float64
	// Progress receives a line every few seconds.
	Progress func(format string, args ...any)
}

// Result is what Run measured.
type Result struct {
	Options
	Timings config.GossipTimings
	// Build is how long the ring took to form (every member seeing every
	// other alive).
	Build      time.Duration
	Detections []Detection
	Windows    []Window
	// RSS is the process's resident memory with the ring formed, at rest.
	RSS uint64
	// Unsettled counts the kill batches after which the ring had not
	// settled (every member seeing every other alive) in settleWait.
	Unsettled int
	// Replaced counts the members that missed a join while the ring
	// formed and were replaced (Cluster.ReplaceLaggards).
	Replaced int
}

// Window is a stretch at rest.
type Window struct {
	Name     string
	Loss     float64
	Hogs     int
	Duration time.Duration
	// FalseReports counts the times a member saw a member that was never
	// killed dead; FalseSubjects the members first seen so in the window.
	FalseReports, FalseSubjects int
	Traffic                     TrafficCount
	// CPU is the process's CPU time in the window, all members.
	CPU time.Duration
	// SchedP99 is the 99th percentile of the time goroutines waited to
	// run (Go's /sched/latencies:seconds): how late memberlist's timers
	// fire.
	SchedP99 time.Duration
	// Recovery is how long after the window every member saw every
	// other alive again; Unsettled says so when that did not happen.
	Recovery  time.Duration
	Unsettled string
}

// Run builds the ring, measures it at rest and while members crash, and
// shuts it down.
func Run(ctx context.Context, o Options) (Result, error) {
	timings, ok := config.GossipProfiles[o.Profile]
	if !ok {
		return Result{}, fmt.Errorf("unknown profile %q", o.Profile)
	}
	res := Result{Options: o, Timings: timings}
	c := NewCluster(timings, o.Dilation)
	defer c.Close()

	start := time.Now()
	buildTimeout := o.BuildTimeout
	if buildTimeout == 0 {
		buildTimeout = 10 * time.Minute
	}
	// The first members join one by one, so that the later ones have
	// several seeds; then many at once.
	if err := c.Grow(ctx, min(o.Size, 3), 1); err != nil {
		return res, err
	}
	for c.Size() < o.Size {
		if time.Since(start) > buildTimeout {
			ok, of := c.Converged()
			return res, fmt.Errorf("this process could not form a ring of %d in %s: %d members started, %d of them see all alive", o.Size, buildTimeout, of, ok)
		}
		batch := min(o.Size-c.Size(), 50)
		if err := c.Grow(ctx, batch, 16); err != nil {
			return res, err
		}
		o.Progress("N=%d %s: %d members started (%s, process CPU %s so far)", o.Size, o.Profile, c.Size(), time.Since(start).Round(time.Second), cpuTime().Round(time.Second))
		// Each batch settles before the next joins, as nodes of a real
		// cluster come up over minutes: hundreds of joins at once in one
		// process starve it into a ring that never settles.
		if err := c.WaitConverged(ctx, c.stretch(joinSettle), func(ok, of int) {
			o.Progress("N=%d %s: %d of %d members see all alive (%s)", o.Size, o.Profile, ok, of, time.Since(start).Round(time.Second))
		}); err == nil {
			continue
		}
		// A few members missed a newcomer: replace them rather than wait
		// minutes for push/pull (ReplaceLaggards says why). Replacements
		// joining together may miss each other in turn: a few rounds.
		for range 5 {
			o.Progress("N=%d %s: replacing members that missed a join: %s", o.Size, o.Profile, c.Laggards(3))
			n, err := c.ReplaceLaggards(ctx, max(1, c.Size()/20))
			if err != nil {
				return res, err
			}
			res.Replaced += n
			if n == 0 || c.WaitConverged(ctx, c.stretch(joinSettle), func(int, int) {}) == nil {
				break
			}
		}
		if err := c.WaitConverged(ctx, max(time.Second, buildTimeout-time.Since(start)), func(ok, of int) {
			o.Progress("N=%d %s: %d of %d members see all alive (%s): %s", o.Size, o.Profile, ok, of, time.Since(start).Round(time.Second), c.Laggards(3))
		}); err != nil {
			return res, fmt.Errorf("this process could not form a ring of %d: %w", o.Size, err)
		}
	}
	if err := c.WaitConverged(ctx, max(time.Minute, buildTimeout-time.Since(start)), func(ok, of int) {
		o.Progress("N=%d %s: %d of %d members see all alive (%s)", o.Size, o.Profile, ok, of, time.Since(start).Round(time.Second))
	}); err != nil {
		return res, fmt.Errorf("this process could not form a ring of %d: %w", o.Size, err)
	}
	res.Build = time.Since(start)
	o.Progress("N=%d %s: ring formed in %s", o.Size, o.Profile, res.Build.Round(100*time.Millisecond))

	// Let the join's gossip die down before measuring the ring at rest.
	settle(ctx, c.stretch(o.Settle))
	res.RSS = rss()

	windows := []Window{{Name: "at rest, 0% loss"}}
	for _, l := range o.Losses {
		windows = append(windows, Window{Name: fmt.Sprintf("%g%% loss", 100*l), Loss: l})
	}
	if o.Hogs > 0 {
		windows = append(windows, Window{Name: fmt.Sprintf("CPU starved (%d busy goroutines, GOMAXPROCS %d)", o.Hogs, runtime.GOMAXPROCS(0)), Hogs: o.Hogs})
	}
	for i := range windows {
		w := &windows[i]
		o.Progress("N=%d %s: window %q for %s", o.Size, o.Profile, w.Name, o.Rest)
		if err := measureWindow(ctx, c, w, c.stretch(o.Rest)); err != nil {
			return res, err
		}
		// In the protocol's time: the same CPU and packets in a window
		// Dilation times shorter.
		w.Duration = c.shrink(w.Duration)
		o.Progress("N=%d %s: %q: %d false dead reports (%d members), %.0f%% CPU, scheduling p99 %s", o.Size, o.Profile, w.Name,
			w.FalseReports, w.FalseSubjects, 100*w.CPU.Seconds()/w.Duration.Seconds(), w.SchedP99)
		// Members seen dead by mistake come back (they refute); wait for
		// that before the next window. A ring that keeps flapping (the
		// process starved by the machine) is noted and measured on.
		settled := time.Now()
		if err := c.WaitConverged(ctx, c.stretch(settleWait), func(ok, of int) {
			o.Progress("N=%d %s: after %q, %d of %d members see all alive", o.Size, o.Profile, w.Name, ok, of)
		}); err != nil {
			w.Unsettled = err.Error()
			o.Progress("N=%d %s: after %q: %v; measuring on", o.Size, o.Profile, w.Name, err)
		}
		w.Recovery = c.shrink(time.Since(settled))
	}
	res.Windows = windows

	// Crashes. The wait per batch bounds a kill nobody notices: the
	// longest suspicion (6 × the shortest) and a few probe rounds.
	wait := 6*suspicionTimeout(timings, o.Size) + 20*timings.ProbeInterval
	batch := max(1, o.KillBatch)
	for len(res.Detections) < o.Kills {
		n := min(batch, o.Kills-len(res.Detections))
		d, err := c.Kill(ctx, n, c.stretch(o.KillSpacing), c.stretch(wait))
		if err != nil {
			return res, err
		}
		for i := range d {
			d[i].First, d[i].Last = c.shrink(d[i].First), c.shrink(d[i].Last)
		}
		res.Detections = append(res.Detections, d...)
		last := d[len(d)-1]
		o.Progress("N=%d %s: %d of %d kills; the last seen dead by the first member after %s, by all after %s",
			o.Size, o.Profile, len(res.Detections), o.Kills, last.First.Round(10*time.Millisecond), last.Last.Round(10*time.Millisecond))
		if err := c.Grow(ctx, n, n); err != nil {
			return res, err
		}
		if err := c.WaitConverged(ctx, c.stretch(settleWait), func(ok, of int) {
			o.Progress("N=%d %s: replacing the crashed: %d of %d members see all alive", o.Size, o.Profile, ok, of)
		}); err != nil {
			res.Unsettled++
			o.Progress("N=%d %s: replacing the crashed: %v; killing on", o.Size, o.Profile, err)
		}
	}
	return res, nil
}

// joinSettle is how long, in the protocol's time, a batch of joins has to
// reach every member by gossip before the members that missed one are
// replaced.
const joinSettle = 10 * time.Second

// settleWait bounds the wait for a ring to settle after a window or a
// kill batch: a ring that has not settled by then keeps flapping, and
// waiting longer only stretches the run.
const settleWait = time.Minute

// measureWindow runs the ring for d under w's conditions.
func measureWindow(ctx context.Context, c *Cluster, w *Window, d time.Duration) error {
	c.Traffic().SetLoss(w.Loss)
	defer c.Traffic().SetLoss(0)
	stop := make(chan struct{})
	for range w.Hogs {
		go hog(stop)
	}
	defer close(stop)
	reports0, subjects0 := c.FalseDead()
	traffic0, cpu0, sched0 := c.Traffic().Count(), cpuTime(), schedHistogram()
	start := time.Now()
	settle(ctx, d)
	w.Duration = time.Since(start)
	w.CPU = cpuTime() - cpu0
	w.Traffic = c.Traffic().Count().Sub(traffic0)
	w.SchedP99 = schedP99(sched0, schedHistogram())
	reports, subjects := c.FalseDead()
	w.FalseReports, w.FalseSubjects = reports-reports0, subjects-subjects0
	return ctx.Err()
}

// hog burns CPU until stop is closed.
func hog(stop <-chan struct{}) {
	x := 1.0
	for {
		select {
		case <-stop:
			return
		default:
		}
		for range 100000 {
			x = math.Sqrt(x + 1)
		}
	}
}

func settle(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// suspicionTimeout is memberlist's shortest suspicion timeout (its
// suspicionTimeout): SuspicionMult × max(1, log10(N)) × ProbeInterval. A
// suspicion starts at 6× that (SuspicionMaxTimeoutMult) and shrinks to it
// as other members confirm it.
func suspicionTimeout(t config.GossipTimings, n int) time.Duration {
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	return time.Duration(float64(t.SuspicionMult) * scale * float64(t.ProbeInterval))
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss is the process's resident memory now (VmRSS), in bytes.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

const schedLatencies = "/sched/latencies:seconds"

func schedHistogram() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// schedP99 is the 99th percentile of the scheduling latencies between two
// readings of the cumulative histogram.
func schedP99(before, after *metrics.Float64Histogram) time.Duration {
	return schedPercentile(before, after, 0.99)
}

// schedPercentile is the p-th percentile (0 to 1) of the scheduling
// latencies between two readings of the cumulative histogram: the upper
// bound of the bucket it falls in.
func schedPercentile(before, after *metrics.Float64Histogram, p float64) time.Duration {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return 0
	}
	counts := make([]uint64, len(after.Counts))
	var total uint64
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(p * float64(total)))
	var sum uint64
	for i, n := range counts {
		sum += n
		if sum >= want {
			upper := after.Buckets[i+1]
			if math.IsInf(upper, 1) {
				upper = after.Buckets[i]
			}
			return time.Duration(upper * float64(time.Second))
		}
	}
	return 0
}

// percentile is the p-th percentile (0 to 1) of v, nearest rank.
func percentile(v []time.Duration, p float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// pushPullRepair is memberlist's push/pull interval in a ring of n (its
// pushPullScale of the LAN default of 30 s): how long a member that missed
// a gossip message may wait for the full-state exchange that repairs it.
func pushPullRepair(n int) time.Duration {
	const interval, threshold = 30 * time.Second, 32
	if n <= threshold {
		return interval
	}
	return time.Duration(math.Ceil(math.Log2(float64(n))-math.Log2(threshold))+1) * interval
}
