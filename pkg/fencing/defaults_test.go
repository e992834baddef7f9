package fencing

import (
	"testing"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// TestDefaults keeps the fencer's defaults what they were when pkg/config
// held them (docs/configuration.md lists those of the fencer section).
func TestDefaults(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"DefaultLeaseDuration", DefaultLeaseDuration, 15 * time.Second},
		{"DefaultMonitorInterval", DefaultMonitorInterval, 5 * time.Minute},
		{"DefaultMaxConcurrentPowerReads", DefaultMaxConcurrentPowerReads, 16},
		{"DefaultChallengeTimeout", DefaultChallengeTimeout, 2 * time.Second},
		{"DefaultKubeletLeaseReadTimeout", DefaultKubeletLeaseReadTimeout, 2 * time.Second},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestNewAppliesDefaults: what the configuration leaves unset arrives
// here as zero and runs with the fencer's defaults, never unbounded; a
// zero MonitorInterval stays off (the agent sets DefaultMonitorInterval
// for a file that does not set fencer.monitorInterval).
func TestNewAppliesDefaults(t *testing.T) {
	client := fake.NewClientset()
	inf, _ := NewInformers(client, informers.NewSharedInformerFactory(client, 0), "fenced-system")
	f, err := New(Config{Informers: inf})
	if err != nil {
		t.Fatal(err)
	}
	c, lease := f.cfg, f.settings().LeaseDuration // the lease's, with the settings a reload changes
	if lease != DefaultLeaseDuration || c.ChallengeTimeout != DefaultChallengeTimeout ||
		c.MaxConcurrentPowerReads != DefaultMaxConcurrentPowerReads || c.MonitorInterval != 0 {
		t.Errorf("New filled lease %s, challenge %s, reads %d, monitor %s; want %s, %s, %d, 0 (off)",
			lease, c.ChallengeTimeout, c.MaxConcurrentPowerReads, c.MonitorInterval,
			DefaultLeaseDuration, DefaultChallengeTimeout, DefaultMaxConcurrentPowerReads)
	}
}
