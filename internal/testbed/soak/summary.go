package soak

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// LeakThreshold is the growth of an agent's goroutines or RSS, from after
// the warm-up to the end, that the summary flags.
const LeakThreshold = 0.10

// Durations are measured times of one kind.
type Durations []time.Duration

// P50 is the median (the lower middle of an even count); 0 when empty.
func (d Durations) P50() time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// Max is the largest; 0 when empty.
func (d Durations) Max() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

func (d Durations) String() string {
	if len(d) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d, p50 %.1f s, max %.1f s", len(d), d.P50().Seconds(), d.Max().Seconds())
}

// Level is a gauge sampled at the end of the warm-up and at the end.
type Level struct {
	Warm, End float64
}

// Growth is (End-Warm)/Warm; 0 without a warm-up level.
func (l Level) Growth() float64 {
	if l.Warm <= 0 {
		return 0
	}
	return (l.End - l.Warm) / l.Warm
}

// Leaks reports whether the growth is beyond LeakThreshold.
func (l Level) Leaks() bool { return l.Growth() > LeakThreshold }

// Agent is one machine's fenced agent over the run.
type Agent struct {
	Machine string
	// Continuous: the same agent process from the warm-up to the end
	// (neither its machine nor the agent restarted), so its levels compare.
	Continuous bool
	Goroutines Level
	// RSS in bytes.
	RSS Level
}

// Summary is what the randomized phase found.
type Summary struct {
	Seed     uint64
	Duration time.Duration
	Machines int
	Faults   map[Kind]int
	// TaintsWithEvidence: taints that appeared with valid evidence.
	TaintsWithEvidence int
	Violations         []Violation
	// FenceTimes: from a power loss (or a clean shutdown request) to the
	// taint with evidence. ReturnTimes: from the machine switched on again
	// to the taint removed.
	FenceTimes, ReturnTimes Durations
	// AgentRestarts: the agent process changed without a new boot.
	// Injected ones are the fencer restarts the soak did.
	AgentRestarts, InjectedRestarts int
	Agents                          []Agent
}

// Count counts the violations of inv.
func (s Summary) Count(inv Invariant) int {
	n := 0
	for _, v := range s.Violations {
		if v.Invariant == inv {
			n++
		}
	}
	return n
}

// Failed reports whether any invariant was broken.
func (s Summary) Failed() bool { return len(s.Violations) > 0 }

// Write prints the summary table (Markdown, to paste into docs/measurements.md) and
// then the violations, if any.
func (s Summary) Write(w io.Writer) {
	total := 0
	var kinds []string
	for _, k := range Kinds {
		if n := s.Faults[k]; n > 0 {
			total += n
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	verdict := func(inv Invariant) string {
		n := s.Count(inv)
		if n == 0 {
			return "0"
		}
		return fmt.Sprintf("**%d — FAIL**", n)
	}
	fmt.Fprintf(w, "randomized faults: seed %d (replay: SOAK_SEED=%d), %s, %d machines\n\n", s.Seed, s.Seed, s.Duration.Round(time.Second), s.Machines)
	fmt.Fprintln(w, "| | |")
	fmt.Fprintln(w, "|---|---|")
	fmt.Fprintf(w, "| faults injected | %d (%s) |\n", total, strings.Join(kinds, ", "))
	fmt.Fprintf(w, "| taints with evidence | %d |\n", s.TaintsWithEvidence)
	fmt.Fprintf(w, "| taints without evidence | %s |\n", verdict(TaintWithoutEvidence))
	fmt.Fprintf(w, "| taints on a live machine | %s |\n", verdict(TaintOnLiveMachine))
	fmt.Fprintf(w, "| overlapping writers (volumes, power Leases) | %s |\n", verdict(OverlappingWriters))
	fmt.Fprintf(w, "| taints left behind after recovery | %s |\n", verdict(TaintLeftBehind))
	fmt.Fprintf(w, "| power losses / shutdowns never tainted | %s |\n", verdict(PowerLossNotFenced))
	fmt.Fprintf(w, "| fault → tainted with evidence | %s |\n", s.FenceTimes)
	fmt.Fprintf(w, "| switched on → taint removed | %s |\n", s.ReturnTimes)
	fmt.Fprintf(w, "| agent restarts | %d (%d of them injected fencer restarts) |\n", s.AgentRestarts, s.InjectedRestarts)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| agent | goroutines after warm-up → end | RSS after warm-up → end |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, a := range s.Agents {
		if !a.Continuous {
			fmt.Fprintf(w, "| %s | restarted during the run: not comparable | |\n", a.Machine)
			continue
		}
		fmt.Fprintf(w, "| %s | %.0f → %.0f (%s) | %.1f → %.1f MiB (%s) |\n", a.Machine,
			a.Goroutines.Warm, a.Goroutines.End, growth(a.Goroutines),
			a.RSS.Warm/(1<<20), a.RSS.End/(1<<20), growth(a.RSS))
	}
	if len(s.Violations) > 0 {
		fmt.Fprintf(w, "\n%d invariant violations — FAIL:\n", len(s.Violations))
		for _, v := range s.Violations {
			fmt.Fprintf(w, "  %s\n", v)
		}
	}
}

func growth(l Level) string {
	s := fmt.Sprintf("%+.1f %%", 100*l.Growth())
	if l.Leaks() {
		s += " **> 10 %**"
	}
	return s
}
