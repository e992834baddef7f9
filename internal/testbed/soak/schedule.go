// Package soak is the bookkeeping of the endurance run (`make soak`): which
// fault comes next on which machine (Scheduler, from a seeded RNG so a run
// can be replayed), the invariants checked the whole time on every Node and
// power Lease the API server shows (Checker), and the figures and the table
// at the end (Summary). It holds no harness: the driver in test/e2e applies
// the faults to real machines and feeds what it sees in here, so all of this
// is tested in ordinary `go test` in milliseconds.
package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Kind is a kind of fault the soak injects.
type Kind string

// The faults, each undone by its recovery (in brackets).
const (
	PowerLoss        Kind = "power-loss"         // SIGKILL of the machine (power on through the BMC)
	Hang             Kind = "hang"               // SIGSTOP of the machine (SIGCONT)
	PartitionAPI     Kind = "partition-api"      // cut from the API server (heal)
	PartitionPeers   Kind = "partition-peers"    // cut from the other machines (heal)
	Isolate          Kind = "isolate"            // cut from everything (heal)
	BMCDown          Kind = "bmc-down"           // the BMC stops answering (up again)
	BMCWrongPassword Kind = "bmc-wrong-password" // the BMC password rotated (restored)
	CleanShutdown    Kind = "clean-shutdown"     // systemctl poweroff (power on through the BMC)
	FencerRestart    Kind = "fencer-restart"     // the fencer's agent killed and restarted (none needed)
)

// Kinds is every Kind, in the order of the summary table.
var Kinds = []Kind{PowerLoss, Hang, PartitionAPI, PartitionPeers, Isolate, BMCDown, BMCWrongPassword, CleanShutdown, FencerRestart}

// Fault is one fault the Scheduler chose.
type Fault struct {
	Seq     int
	Kind    Kind
	Machine string
	// Hold is how long the fault lasts before its recovery starts (for a
	// power loss or a shutdown: after the node is tainted).
	Hold time.Duration
}

func (f Fault) String() string { return fmt.Sprintf("#%d %s on %s", f.Seq, f.Kind, f.Machine) }

// Plan says which machines each kind of fault may hit and how many machines
// may be faulted at once.
type Plan struct {
	// Targets are the machines each kind may hit; a kind without targets
	// is never chosen.
	Targets map[Kind][]string
	// Weights bias the choice of kind (default 1 each).
	Weights map[Kind]int
	// MaxConcurrent bounds the machines faulted at the same time (fencer
	// restarts do not count: they leave the node healthy), so that the
	// storm guard's maxUnhealthy stays meaningful.
	MaxConcurrent int
	// MinHold and MaxHold bound a fault's Hold.
	MinHold, MaxHold time.Duration
	// MaxGap bounds the pause before the next fault (uniform in [0, MaxGap]).
	MaxGap time.Duration
	// First are the kinds of the first faults, in order (their machines
	// still drawn at random), so that a short run covers them; the rest
	// are drawn at random.
	First []Kind
}

// Scheduler chooses faults at random from a seeded RNG: the same seed and
// the same sequence of Next and Done calls give the same faults.
type Scheduler struct {
	plan Plan
	mu   sync.Mutex
	rng  *rand.Rand
	busy map[string]Kind // machines faulted now, and how
	n    int             // faults started
	// pending is the fault drawn that could not start yet.
	pending *Fault
}

// NewScheduler returns a Scheduler for plan, seeded with seed.
func NewScheduler(plan Plan, seed uint64) *Scheduler {
	return &Scheduler{plan: plan, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), busy: map[string]Kind{}}
}

// Next returns the next fault and marks its machine busy until Done. ok is
// false while that fault cannot start (its machine is still faulted, or
// MaxConcurrent machines are): wait for a Done and ask again — the same
// fault comes back. So the faults, their machines and holds are a function
// of the seed alone; only when each starts depends on the recoveries.
func (s *Scheduler) Next() (f Fault, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		kind, ok := s.drawKind()
		if !ok {
			return Fault{}, false
		}
		targets := s.plan.Targets[kind]
		s.pending = &Fault{Seq: s.n + 1, Kind: kind, Machine: targets[s.rng.IntN(len(targets))],
			Hold: s.duration(s.plan.MinHold, s.plan.MaxHold)}
	}
	f = *s.pending
	faulted := 0
	for _, k := range s.busy {
		if k != FencerRestart {
			faulted++
		}
	}
	if _, busy := s.busy[f.Machine]; busy || (f.Kind != FencerRestart && faulted >= s.plan.MaxConcurrent) {
		return Fault{}, false
	}
	s.pending = nil
	s.n++
	s.busy[f.Machine] = f.Kind
	return f, true
}

// drawKind draws a kind that has targets, by weight (Plan.First first).
func (s *Scheduler) drawKind() (Kind, bool) {
	if s.n < len(s.plan.First) {
		k := s.plan.First[s.n]
		return k, len(s.plan.Targets[k]) > 0
	}
	total := 0
	for _, k := range Kinds {
		if len(s.plan.Targets[k]) > 0 {
			total += s.weight(k)
		}
	}
	if total == 0 {
		return "", false
	}
	r := s.rng.IntN(total)
	for _, k := range Kinds {
		if len(s.plan.Targets[k]) == 0 {
			continue
		}
		if r < s.weight(k) {
			return k, true
		}
		r -= s.weight(k)
	}
	return "", false // not reached: r < total
}

// Gap is the pause before the next fault.
func (s *Scheduler) Gap() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.duration(0, s.plan.MaxGap)
}

// Done frees f's machine once its recovery is over.
func (s *Scheduler) Done(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, f.Machine)
}

// Busy lists the machines faulted now, sorted.
func (s *Scheduler) Busy() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for m := range s.busy {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

func (s *Scheduler) weight(k Kind) int {
	if w, ok := s.plan.Weights[k]; ok {
		return w
	}
	return 1
}

// duration draws uniformly from [lo, hi], to the millisecond.
func (s *Scheduler) duration(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64((hi-lo)/time.Millisecond)+1))*time.Millisecond
}
