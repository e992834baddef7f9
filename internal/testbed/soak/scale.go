package soak

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// ScaleFigures are one run's figures of the fencer at 1000 Nodes
// (test/scale/fencer, written where FENCED_BENCH_SCALE_FIGURES says), for
// the medians over several runs (make bench-scale-medians).
type ScaleFigures struct {
	// RestCPUPercent is the fencer's CPU at rest in % of one core;
	// RestRSSMB and RestAnonMB its median resident and anonymous memory.
	RestCPUPercent float64 `json:"restCPUPercent"`
	RestRSSMB      float64 `json:"restRSSMB"`
	RestAnonMB     float64 `json:"restAnonMB"`
	// Racks are the power losses, in the order of the run.
	Racks []RackFigures `json:"racks"`
}

// RackFigures are one power loss of a run: times from the loss.
type RackFigures struct {
	Label string `json:"label"`
	Nodes int    `json:"nodes"`
	// BeatsStopped is when the fencer saw the last node's beats stop.
	BeatsStopped time.Duration `json:"beatsStoppedNs"`
	// First, Median and Last are the rack's taints.
	First  time.Duration `json:"firstTaintNs"`
	Median time.Duration `json:"medianTaintNs"`
	Last   time.Duration `json:"lastTaintNs"`
}

// ScaleMedians tables runs: each figure's median, lowest and highest.
func ScaleMedians(runs []ScaleFigures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "fencer at 1000 Nodes, %d runs of make bench-scale: median (lowest – highest)\n\n", len(runs))
	b.WriteString("| figure | median | lowest | highest |\n|---|---|---|---|\n")
	gauge := func(name, unit string, get func(ScaleFigures) float64) {
		var v []float64
		for _, r := range runs {
			v = append(v, get(r))
		}
		if len(v) == 0 {
			return
		}
		slices.Sort(v)
		fmt.Fprintf(&b, "| %s | %.1f %s | %.1f %s | %.1f %s |\n", name, v[(len(v)-1)/2], unit, v[0], unit, v[len(v)-1], unit)
	}
	gauge("fencer CPU at rest", "% of a core", func(r ScaleFigures) float64 { return r.RestCPUPercent })
	gauge("fencer RSS at rest", "MB", func(r ScaleFigures) float64 { return r.RestRSSMB })
	gauge("of which anonymous", "MB", func(r ScaleFigures) float64 { return r.RestAnonMB })
	var labels []string
	for _, r := range runs {
		for _, k := range r.Racks {
			if !slices.Contains(labels, k.Label) {
				labels = append(labels, k.Label)
			}
		}
	}
	for _, l := range labels {
		times := func(name string, get func(RackFigures) time.Duration) {
			var d Durations
			for _, r := range runs {
				for _, k := range r.Racks {
					if k.Label == l {
						d = append(d, get(k))
					}
				}
			}
			if slices.Max(append(d, 0)) == 0 {
				return // not measured (the solo node's beats: it is in doubt first)
			}
			fmt.Fprintf(&b, "| %s: %s | %.1f s | %.1f s | %.1f s |\n", l, name, d.P50().Seconds(), slices.Min(d).Seconds(), d.Max().Seconds())
		}
		times("beats stopped (last node)", func(k RackFigures) time.Duration { return k.BeatsStopped })
		times("first taint", func(k RackFigures) time.Duration { return k.First })
		times("median taint", func(k RackFigures) time.Duration { return k.Median })
		times("last taint", func(k RackFigures) time.Duration { return k.Last })
	}
	return b.String()
}
