package heartbeat

import (
	"math"
	"sync"
	"time"
)

// A Detector tells, for each member that sends this agent beats, whether
// its beats have stopped — in a time that depends on that member's own
// pace and jitter, not on how many members there are (gossip's suspicion
// timeout grows with log N). It is a phi-accrual failure detector
// (Hayashibara et al., 2004, as Akka and Cassandra use it): each member's
// recent inter-arrival times give a normal distribution, and phi is how
// unlikely — -log10 of the probability — it is that the next beat is
// still to come after the silence so far. Beats carry nothing a decision
// rests on: a forged beat can only make a silent member look alive for
// longer, as a forged gossip alive can.
//
// The Detector is pure bookkeeping under a mutex: beats and questions
// come with their times, so that tests drive it with a clock of their own.
type Detector struct {
	cfg DetectorConfig

	mu      sync.Mutex
	members map[string]*arrivals
}

// DetectorConfig tunes a Detector. Zero values take DefaultDetectorConfig's.
type DetectorConfig struct {
	// Interval is the pace senders beat at; it seeds a member's history
	// until real intervals replace it.
	Interval time.Duration
	// Threshold is the phi above which a member is silent: 8 is a
	// probability of 1e-8 that its next beat is merely late, by its own
	// history.
	Threshold float64
	// DoubtThreshold is the phi above which a member is in doubt: its
	// beats are late enough to ask its agent, not yet to read its power.
	DoubtThreshold float64
	// MinStdDev bounds the deviation from below: a member beating like
	// clockwork would otherwise be suspected a hair after its usual
	// interval.
	MinStdDev time.Duration
	// AcceptablePause is added to the mean: the silence any member is
	// allowed beyond its usual pace (lost packets, a garbage collection),
	// whatever its history.
	AcceptablePause time.Duration
	// Window is how many recent intervals make a member's history.
	Window int
}

// DefaultDetectorConfig is the configuration of a Detector that sets
// nothing: beats every 200 ms; a member that beats on time is silent
// 1.11 s after its last beat (phi 8 is 5.2 deviations past the mean: 200
// ms + the 550 ms pause + 5.2 × the 70 ms floor), between four lost beats
// in a row (a gap of 1.0 s) and five (1.2 s). Five in a row, at 5 %
// packet loss, happen 0.13 times a day per member; four would be 2.7. It
// is in doubt at phi 1 — 0.84 s after its last beat, when a fencer asks
// its agent, so that the answer (or silence) is in by the time it is
// silent.
func DefaultDetectorConfig() DetectorConfig {
	return DetectorConfig{
		Interval:        200 * time.Millisecond,
		Threshold:       8,
		DoubtThreshold:  1,
		MinStdDev:       70 * time.Millisecond,
		AcceptablePause: 550 * time.Millisecond,
		Window:          100,
	}
}

func (c DetectorConfig) withDefaults() DetectorConfig {
	d := DefaultDetectorConfig()
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	if c.Threshold <= 0 {
		c.Threshold = d.Threshold
	}
	if c.DoubtThreshold <= 0 || c.DoubtThreshold > c.Threshold {
		c.DoubtThreshold = min(d.DoubtThreshold, c.Threshold)
	}
	if c.MinStdDev <= 0 {
		c.MinStdDev = d.MinStdDev
	}
	if c.AcceptablePause < 0 {
		c.AcceptablePause = 0
	} else if c.AcceptablePause == 0 {
		c.AcceptablePause = d.AcceptablePause
	}
	if c.Window <= 0 {
		c.Window = d.Window
	}
	return c
}

// arrivals is one member's history: its last beat and a window of recent
// intervals, with their running sum and sum of squares.
type arrivals struct {
	last      time.Time
	intervals []float64 // seconds, a ring of cfg.Window
	next      int
	sum, sq   float64
}

// NewDetector returns an empty Detector.
func NewDetector(cfg DetectorConfig) *Detector {
	return &Detector{cfg: cfg.withDefaults(), members: map[string]*arrivals{}}
}

// Beat records a beat of member name that arrived at at. A beat older
// than the last one (reordered on the way) changes nothing.
func (d *Detector) Beat(name string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.members[name]
	if !ok {
		// A new member's history starts as two intervals at the senders'
		// pace, one each side of it, so that its first silence is judged
		// with a sane deviation.
		a = &arrivals{last: at}
		iv := d.cfg.Interval.Seconds()
		a.add(iv-iv/4, d.cfg.Window)
		a.add(iv+iv/4, d.cfg.Window)
		d.members[name] = a
		return
	}
	if !at.After(a.last) {
		return
	}
	a.add(at.Sub(a.last).Seconds(), d.cfg.Window)
	a.last = at
}

func (a *arrivals) add(v float64, window int) {
	if len(a.intervals) < window {
		a.intervals = append(a.intervals, v)
	} else {
		old := a.intervals[a.next]
		a.sum -= old
		a.sq -= old * old
		a.intervals[a.next] = v
		a.next = (a.next + 1) % window
	}
	a.sum += v
	a.sq += v * v
}

// stats is the history's mean and standard deviation, in seconds, the
// deviation bounded below by min.
func (a *arrivals) stats(min float64) (mean, std float64) {
	n := float64(len(a.intervals))
	mean = a.sum / n
	variance := a.sq/n - mean*mean
	std = math.Sqrt(math.Max(variance, 0))
	return mean, math.Max(std, min)
}

// Phi is how unlikely the silence of member name since its last beat is
// at now, by its own history (0 for a member never heard, or just heard).
func (d *Detector) Phi(name string, now time.Time) float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.members[name]
	if !ok {
		return 0
	}
	return d.phi(a, now)
}

func (d *Detector) phi(a *arrivals, now time.Time) float64 {
	mean, std := a.stats(d.cfg.MinStdDev.Seconds())
	mean += d.cfg.AcceptablePause.Seconds()
	return phi(now.Sub(a.last).Seconds(), mean, std)
}

// phi is -log10 of the probability that a normal variable of mean and std
// exceeds elapsed, by the logistic approximation of the normal's tail
// that Akka uses (error below 1e-4; no math.Erfc underflow far out).
func phi(elapsed, mean, std float64) float64 {
	y := (elapsed - mean) / std
	e := math.Exp(-y * (1.5976 + 0.070566*y*y))
	if elapsed > mean {
		return -math.Log10(e / (1 + e))
	}
	return -math.Log10(1 - 1/(1+e))
}

// Silence is what the Detector says of one member at a moment.
type Silence struct {
	// Known: the member has beaten at least once.
	Known bool
	// Silent: phi is above the threshold; Doubt: above the doubt
	// threshold (so whenever Silent).
	Silent, Doubt bool
	// Last is when its last beat arrived.
	Last time.Time
	// Phi is the value behind Silent.
	Phi float64
}

// Silence says whether member name is silent at now.
func (d *Detector) Silence(name string, now time.Time) Silence {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.members[name]
	if !ok {
		return Silence{}
	}
	p := d.phi(a, now)
	return Silence{Known: true, Silent: p > d.cfg.Threshold, Doubt: p > d.cfg.DoubtThreshold, Last: a.last, Phi: p}
}

// SilentAfter is how long after its last beat member name will be silent
// if no beat comes, by its history now (0 for a member never heard): when
// to look at it again.
func (d *Detector) SilentAfter(name string) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.members[name]
	if !ok {
		return 0
	}
	mean, std := a.stats(d.cfg.MinStdDev.Seconds())
	mean += d.cfg.AcceptablePause.Seconds()
	// phi is increasing in elapsed: search the crossing of the threshold
	// between the mean and far out.
	lo, hi := mean, mean+40*std
	for range 50 {
		mid := (lo + hi) / 2
		if phi(mid, mean, std) > d.cfg.Threshold {
			hi = mid
		} else {
			lo = mid
		}
	}
	return time.Duration(hi * float64(time.Second))
}

// Forget drops member name's history (it left, or its Node is gone).
func (d *Detector) Forget(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.members, name)
}
