package soak

import (
	"strings"
	"testing"
	"time"
)

// TestScaleMedians: each figure's median (the lower middle), lowest and
// highest over the runs, per rack in the order the runs had them.
func TestScaleMedians(t *testing.T) {
	run := func(cpu float64, last time.Duration) ScaleFigures {
		return ScaleFigures{RestCPUPercent: cpu, RestRSSMB: 100, RestAnonMB: 20,
			Racks: []RackFigures{{Label: "solo", Nodes: 1, Last: time.Second}, {Label: "A", Nodes: 40, Last: last}}}
	}
	got := ScaleMedians([]ScaleFigures{run(9, 3*time.Second), run(5, 2*time.Second), run(7, 4*time.Second), run(12, 9*time.Second)})
	for _, want := range []string{
		"4 runs",
		"| fencer CPU at rest | 7.0 % of a core | 5.0 % of a core | 12.0 % of a core |",
		"| A: last taint | 3.0 s | 2.0 s | 9.0 s |",
		"| solo: last taint | 1.0 s | 1.0 s | 1.0 s |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "solo: beats stopped") {
		t.Errorf("a figure never measured is tabled:\n%s", got)
	}
	if strings.Index(got, "| solo:") > strings.Index(got, "| A:") {
		t.Errorf("racks out of the runs' order:\n%s", got)
	}
}
