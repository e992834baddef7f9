package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// fuzzPasswordEnv is the password variable of the seeds in
// testdata/fuzz/FuzzParse that use passwordEnv, so that configurations with
// a BMC inventory can be accepted and explored too.
const fuzzPasswordEnv = "FENCED_FUZZ_PASSWORD"

// FuzzParse feeds arbitrary bytes to the strict YAML decoder and the
// validation behind Load. Seeds (testdata/fuzz/FuzzParse) are the
// configurations in deploy/, verbatim and with passwordEnv instead of
// passwordFile. Properties: Parse never panics; whatever it accepts
// satisfies every documented range (checkAccepted), and re-encoding the
// decoded document gives a file that is accepted again with the very same
// result.
func FuzzParse(f *testing.F) {
	f.Setenv(fuzzPasswordEnv, "fuzz-password")
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, "fuzz.yaml")
		if err != nil {
			return
		}
		checkAccepted(t, cfg)

		var raw Configuration
		if err := yaml.UnmarshalStrict(data, &raw); err != nil {
			t.Fatalf("Parse accepted what the strict decoder refuses: %v", err)
		}
		again, err := yaml.Marshal(raw)
		if err != nil {
			t.Fatalf("re-encoding an accepted configuration: %v", err)
		}
		cfg2, err := Parse(again, "fuzz.yaml")
		if err != nil {
			t.Fatalf("re-encoded configuration is refused: %v\n--- input:\n%s\n--- re-encoded:\n%s", err, data, again)
		}
		// %#v rather than reflect.DeepEqual: it compares NaN equal to
		// itself, which is checkAccepted's business.
		if a, b := describe(cfg), describe(cfg2); a != b {
			t.Fatalf("re-encoded configuration differs:\n%s\n%s", a, b)
		}
	})
}

// describe is cfg in %#v, with the settings that may be unset (nil) shown
// by value rather than by address.
func describe(cfg *Config) string {
	c := *cfg
	var b strings.Builder
	if d := c.Fencer.MonitorInterval; d != nil {
		fmt.Fprintf(&b, "monitorInterval %s; ", *d)
	}
	c.Fencer.MonitorInterval = nil
	c.BMCs = nil
	for _, r := range cfg.BMCs {
		if r.Retries != nil {
			fmt.Fprintf(&b, "%s retries %d; ", r.Node, *r.Retries)
		}
		r.Retries = nil
		fmt.Fprintf(&b, "%#v; ", r)
	}
	return fmt.Sprintf("%s%#v", b.String(), c)
}

// checkAccepted checks the ranges docs/configuration.md and validate.go promise for an
// accepted configuration, independently of how validation reached them.
func checkAccepted(t *testing.T, cfg *Config) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("accepted configuration violates: "+format, args...)
	}
	g, p, fc := cfg.Gossip, cfg.Policy, cfg.Fencer
	if g.Port < 1 || g.Port > 65535 {
		fail("gossip.port %d", g.Port)
	}
	for _, d := range []time.Duration{g.ProbeInterval, g.ProbeTimeout, g.GossipInterval} {
		if d < 0 || d > time.Minute {
			fail("gossip duration %s", d)
		}
	}
	if g.BeatInterval < minBeatInterval || g.BeatInterval > maxBeatInterval {
		fail("gossip.beatInterval %s", g.BeatInterval)
	}
	if g.SuspicionMult < 0 || g.SuspicionMult > 20 {
		fail("gossip.suspicionMult %d", g.SuspicionMult)
	}
	if p.Mode != "confirm-only" && p.Mode != "power-off" {
		fail("policy.mode %q", p.Mode)
	}
	// Written so that NaN fails: NaN compares false to everything, and a
	// NaN maxUnhealthy would switch the storm guard off.
	if !(p.MaxUnhealthy >= 0 && p.MaxUnhealthy <= 1) {
		fail("policy.maxUnhealthy %v is not a share between 0 and 1", p.MaxUnhealthy)
	}
	if p.MaxConcurrentPowerActions < 1 {
		fail("policy.maxConcurrentPowerActions %d", p.MaxConcurrentPowerActions)
	}
	if p.FenceAfter < 0 || p.FenceDelay < 0 || p.FenceDelay > 10*time.Minute || p.ShutdownWait < 0 || p.ShutdownWait > time.Hour {
		fail("policy durations %+v", p)
	}
	// Zero is unset (the fencer's and the device package's defaults,
	// which they apply): never "no bound".
	if fc.LeaseNamespace == "" || fc.LeaseDuration != 0 && (fc.LeaseDuration < 3*time.Second || fc.LeaseDuration > 5*time.Minute) ||
		fc.PowerTimeout != 0 && (fc.PowerTimeout < time.Second || fc.PowerTimeout > 10*time.Minute) ||
		fc.MaxConcurrentPowerReads < 0 || fc.MaxConcurrentPowerReads > 1024 ||
		fc.MonitorInterval != nil && *fc.MonitorInterval != 0 && (*fc.MonitorInterval < 10*time.Second || *fc.MonitorInterval > 24*time.Hour) {
		fail("fencer %+v", fc)
	}
	if g := p.StaleAttachmentGrace; g != 0 && (g < 10*time.Second || g > 24*time.Hour) {
		fail("policy.staleAttachmentGrace %s", g)
	}
	seen := map[string]bool{}
	for _, b := range cfg.BMCs {
		if b.Node == "" || seen[b.Node] {
			fail("node name %q empty or duplicate", b.Node)
		}
		seen[b.Node] = true
		if b.Protocol != ProtocolIPMI && b.Protocol != ProtocolRedfish {
			fail("%s: protocol %q", b.Node, b.Protocol)
		}
		if b.Address == "" || b.Port < 0 || b.Port > 65535 || b.Username == "" {
			fail("%s: address %q port %d username %q", b.Node, b.Address, b.Port, b.Username)
		}
		if (b.Password.File == "") == (b.Password.Env == "") {
			fail("%s: password source %+v is not exactly one", b.Node, b.Password)
		}
		// Zero (Retries nil) is unset: the device package's default.
		if b.Timeout < 0 || b.Timeout > 5*time.Minute || b.Retries != nil && (*b.Retries < 0 || *b.Retries > 10) {
			fail("%s: timeout %s retries %v", b.Node, b.Timeout, b.Retries)
		}
		if b.Protocol == ProtocolIPMI && (b.IPMICipherSuite < 0 || b.IPMICipherSuite > 17) {
			fail("%s: cipher suite %d", b.Node, b.IPMICipherSuite)
		}
	}
}

// TestFuzzParseSeedsAccepted keeps the seeds useful: those written with
// passwordEnv must be accepted, or the fuzzer would start from nothing but
// refusals and never test the re-encoding property on a BMC inventory.
func TestFuzzParseSeedsAccepted(t *testing.T) {
	t.Setenv(fuzzPasswordEnv, "fuzz-password")
	paths, err := filepath.Glob("testdata/fuzz/FuzzParse/*")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no seeds: %v", err)
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			file, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			lit, ok := strings.CutPrefix(strings.TrimSpace(string(file)), "go test fuzz v1\n[]byte(")
			lit, ok2 := strings.CutSuffix(lit, ")")
			data, err := strconv.Unquote(lit)
			if !ok || !ok2 || err != nil {
				t.Fatalf("not a one-value []byte corpus file: %v", err)
			}
			cfg, err := Parse([]byte(data), p)
			if strings.Contains(data, "passwordEnv: "+fuzzPasswordEnv) && (err != nil || len(cfg.BMCs) == 0) {
				t.Errorf("seed with passwordEnv is not accepted with an inventory: %v", err)
			}
		})
	}
}
