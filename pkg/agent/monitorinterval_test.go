package agent

import (
	"testing"
	"time"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing"
)

// TestMonitorInterval: a file without fencer.monitorInterval checks the
// devices at the fencer's default; one that sets it gets it, 0 (off)
// included.
func TestMonitorInterval(t *testing.T) {
	for _, c := range []struct {
		name string
		set  *time.Duration
		want time.Duration
	}{
		{"unset", nil, fencing.DefaultMonitorInterval},
		{"set", new(time.Minute), time.Minute},
		{"0s: off", new(time.Duration(0)), 0},
	} {
		if got := monitorInterval(config.Fencer{MonitorInterval: c.set}); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
