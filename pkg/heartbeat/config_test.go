package heartbeat

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func TestDefaultsAreMemberlistLANProfile(t *testing.T) {
	mc, err := Config{NodeName: "node-a", ClusterName: "prod", SecretKey: make([]byte, 32)}.MemberlistConfig()
	if err != nil {
		t.Fatal(err)
	}
	lan := memberlist.DefaultLANConfig()
	if mc.ProbeInterval != lan.ProbeInterval || mc.ProbeTimeout != lan.ProbeTimeout ||
		mc.SuspicionMult != lan.SuspicionMult || mc.GossipInterval != lan.GossipInterval {
		t.Errorf("defaults drifted from memberlist's LAN profile: %+v", mc)
	}
	// The port is not memberlist's: MetalLB and Docker Swarm gossip on it.
	if mc.BindPort != DefaultPort || mc.BindPort == lan.BindPort {
		t.Errorf("default port %d, want DefaultPort %d, not memberlist's %d", mc.BindPort, DefaultPort, lan.BindPort)
	}
	if mc.Name != "node-a" || mc.Label != "prod" || mc.Keyring == nil || len(mc.Keyring.GetPrimaryKey()) != 32 {
		t.Errorf("identity not applied: name %q label %q keyring %v", mc.Name, mc.Label, mc.Keyring)
	}
}

func TestOverridesAndValidation(t *testing.T) {
	key := make([]byte, 16)
	cases := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"tuned for fast detection", Config{NodeName: "a", SecretKey: key, ProbeInterval: 500 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond, SuspicionMult: 2, BindPort: 17946}, ""},
		{"insecure without key", Config{NodeName: "a", Insecure: true}, ""},
		{"no key", Config{NodeName: "a"}, "no gossip encryption key"},
		{"short key", Config{NodeName: "a", SecretKey: make([]byte, 10)}, "gossip key is 10 bytes"},
		{"no name", Config{SecretKey: key}, "node name is required"},
		{"timeout not below interval", Config{NodeName: "a", SecretKey: key, ProbeInterval: time.Second, ProbeTimeout: time.Second}, "must be shorter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mc, err := tc.cfg.MemberlistConfig()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.cfg.ProbeInterval != 0 && (mc.ProbeInterval != tc.cfg.ProbeInterval || mc.SuspicionMult != tc.cfg.SuspicionMult || mc.BindPort != tc.cfg.BindPort) {
				t.Errorf("overrides not applied: %+v", mc)
			}
			if tc.cfg.Insecure && (mc.SecretKey != nil || mc.Keyring != nil) {
				t.Error("insecure config carries a key")
			}
		})
	}
}

// TestMemberlistHook: Options.Memberlist sees Config's settings and has
// the last word (benchmarks stretch the timers Config does not set), and
// the join backoff follows the probe interval it leaves.
func TestMemberlistHook(t *testing.T) {
	cfg := Config{NodeName: "node-a", SecretKey: make([]byte, 32), ProbeInterval: 2 * time.Second}
	var seen time.Duration
	r, err := New(cfg, Options{Memberlist: func(mc *memberlist.Config) {
		seen = mc.ProbeInterval
		mc.ProbeInterval *= 3
		mc.PushPullInterval = 5 * time.Minute
	}})
	if err != nil {
		t.Fatal(err)
	}
	if seen != 2*time.Second {
		t.Errorf("the hook saw probe interval %s, want Config's 2s", seen)
	}
	if r.mc.ProbeInterval != 6*time.Second || r.mc.PushPullInterval != 5*time.Minute {
		t.Errorf("memberlist config after the hook: probe interval %s, push/pull %s; want 6s and 5m", r.mc.ProbeInterval, r.mc.PushPullInterval)
	}
	if r.retryMin != 6*time.Second {
		t.Errorf("join backoff starts at %s, want the probe interval the hook left (6s)", r.retryMin)
	}
}
