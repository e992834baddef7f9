package config

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"fenced.io/fenced/pkg/fencing/core"
	"sigs.k8s.io/yaml"
)

// Config is a loaded, validated configuration. A setting whose default a
// package below owns (the device package's BMC and fence-agent settings,
// the fencer's timings, the stale report's grace) is left unset when the
// file does not set it — zero, or nil where zero means something — and
// that package applies its default; every other default is applied here.
type Config struct {
	// Source is the file the configuration came from (for messages).
	Source      string
	ClusterName string
	Gossip      Gossip
	Policy      Policy
	Fencer      Fencer
	Shutdown    Shutdown
	// BMCs holds one resolved entry per node of the inventory, in file order.
	BMCs []ResolvedBMC
	// Devices are the declared fence devices by name.
	Devices map[string]FenceDevice
	// Topology holds the levels; use Levels to read a node's.
	Topology Topology
	// Watchdog is the resolved watchdog section (its OrderAfter is
	// Policy.WatchdogOrderAfter).
	Watchdog Watchdog
}

// Watchdog is the resolved watchdog section: Device is "" when no node's
// topology has the watchdog level and the section sets none.
type Watchdog struct {
	Device           string
	Timeout, Confirm time.Duration
	AllowSoftware    bool
}

// WatchdogLevel is the number (from 1) of node's watchdog level among its
// levels, 0 when it has none.
func (c *Config) WatchdogLevel(node string) int {
	for i, l := range c.Levels(node) {
		if len(l) == 1 && l[0].Device == DeviceWatchdog {
			return i + 1
		}
	}
	return 0
}

// ArmsWatchdog reports whether node's agent arms the watchdog device: the
// section names one, and either the configuration is an observer's (no
// power device, no topology: the fencers hold those, and the device alone
// says this node is to be fenced on its watchdog) or its topology gives
// node the watchdog level (a fencer's configuration, shared by nodes that
// are fenced otherwise).
func (c *Config) ArmsWatchdog(node string) bool {
	return c.Watchdog.Device != "" && (!c.CanFence() || c.WatchdogLevel(node) > 0)
}

// Gossip is the resolved gossip section. Zero durations and multipliers
// mean memberlist's LAN defaults (pkg/heartbeat documents them).
type Gossip struct {
	Port int
	// KeyFile or KeyDir (at most one is set) hold the ring's keys.
	KeyFile string
	KeyDir  string
	// Profile is the profile the timings started from; the explicit
	// fields of the section are applied over it.
	Profile GossipProfile
	GossipTimings
	// BeatInterval is how often agents beat to each fencer.
	BeatInterval time.Duration
}

// Policy is the resolved policy section: the decision core's policy
// (core.DefaultPolicy with what the section sets over it, resolvePolicy)
// and the settings of the fencers' stale VolumeAttachment report.
type Policy struct {
	core.Policy
	// StaleAttachmentGrace and DeleteStaleVolumeAttachments drive the
	// fencers' stale VolumeAttachment report (pkg/stale, whose defaults
	// they are when zero).
	StaleAttachmentGrace         time.Duration
	DeleteStaleVolumeAttachments bool
}

// Shutdown is the resolved shutdown section.
type Shutdown struct {
	Announce bool
}

// Fencer is the resolved fencer section. Zero is unset: the default of
// pkg/fencing (LeaseDuration, MaxConcurrentPowerReads, MonitorInterval's
// nil) or of pkg/fencing/device (PowerTimeout), which they apply.
type Fencer struct {
	LeaseNamespace string
	LeaseDuration  time.Duration
	PowerTimeout   time.Duration
	// MonitorInterval is nil when the file does not set it; 0 disables
	// the device checks.
	MonitorInterval *time.Duration
	// MaxConcurrentPowerReads bounds the fencer's power reads in flight.
	MaxConcurrentPowerReads int
}

// ResolvedBMC is one node's BMC after inheriting bmc.defaults. What the
// node needs (protocol, address, username, a password source) is set;
// every setting that is set is valid. A setting neither the node nor
// bmc.defaults sets is unset — zero, Retries nil — and takes the device
// package's default (device.WithDefaults, applied by device.NewDriver).
type ResolvedBMC struct {
	Node     string
	Protocol string
	Address  string
	Port     int
	Username string
	Password PasswordSource
	Timeout  time.Duration
	// Retries is nil when unset: 0 is a setting (no retries).
	Retries *int

	IPMICipherSuite    int
	IPMIPrivilegeLevel string

	RedfishScheme             string
	RedfishSystemPath         string
	RedfishAuth               string
	RedfishCAFile             string
	RedfishInsecureSkipVerify bool
}

// BMC returns the inventory entry of node, if there is one.
func (c *Config) BMC(node string) (ResolvedBMC, bool) {
	for _, b := range c.BMCs {
		if b.Node == node {
			return b, true
		}
	}
	return ResolvedBMC{}, false
}

// PasswordSource says where a BMC password comes from. It never holds the
// password itself, so it is safe to print.
type PasswordSource struct {
	File string
	Env  string
}

// Read returns the password. A file's trailing newline is removed because
// `kubectl create secret --from-file` and editors add one. A file that
// group or others may write is refused (CheckSecretFile); the warning for
// one that others may read is left to callers with a logger
// (device.NewDriver).
func (p PasswordSource) Read() (string, error) {
	switch {
	case p.File != "":
		b, _, err := ReadSecretFile(p.File)
		if err != nil {
			return "", fmt.Errorf("reading password file: %w", err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return "", fmt.Errorf("password file %s is empty", p.File)
		}
		return pw, nil
	case p.Env != "":
		pw, ok := os.LookupEnv(p.Env)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", p.Env)
		}
		if pw == "" {
			return "", fmt.Errorf("environment variable %s is empty", p.Env)
		}
		return pw, nil
	}
	return "", errors.New("no password source configured")
}

func (p PasswordSource) String() string {
	if p.File != "" {
		return "file " + p.File
	}
	return "env " + p.Env
}

// Load reads, decodes and validates the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes and validates a configuration; source names it in errors.
// Every problem of the file is reported, as an *Error: first those of its
// keys and values' kinds (checkKeys), which stop the decoding; then, when
// there are none, those of its settings.
func Parse(data []byte, source string) (*Config, error) {
	probs, lines := checkKeys(data)
	if len(probs) > 0 {
		return nil, &Error{Source: source, Problems: probs}
	}
	var raw Configuration
	if err := yaml.UnmarshalStrict(data, &raw); err != nil {
		return nil, &Error{Source: source, Problems: []Problem{decodeProblem(err)}}
	}
	if raw.APIVersion != APIVersion || raw.Kind != Kind {
		return nil, &Error{Source: source, Problems: []Problem{{Path: "apiVersion/kind",
			Msg: fmt.Sprintf("%q/%q; want %q/%q", raw.APIVersion, raw.Kind, APIVersion, Kind)}}}
	}
	var fe fieldErrors
	cfg := &Config{Source: source, ClusterName: raw.ClusterName}
	cfg.Gossip = resolveGossip(&fe, raw.Gossip)
	cfg.Policy = resolvePolicy(&fe, raw.Policy)
	cfg.Fencer = resolveFencer(&fe, raw.Fencer)
	cfg.Shutdown = Shutdown{Announce: DefaultShutdownAnnounce}
	if raw.Shutdown.Announce != nil {
		cfg.Shutdown.Announce = *raw.Shutdown.Announce
	}
	bmcs := resolveInventory(&fe, raw.BMC)
	cfg.Devices = resolveDevices(&fe, raw.FenceDevices)
	cfg.Topology = resolveTopology(&fe, raw.Topology, cfg.Devices, bmcs)
	cfg.Watchdog, cfg.Policy.WatchdogOrderAfter = resolveWatchdog(&fe, raw.Watchdog, cfg.Topology)
	cfg.Policy.WatchdogAllowSoftware = cfg.Watchdog.AllowSoftware
	if len(fe.problems) > 0 {
		// In file order, each on the line of its setting or, for one the
		// file leaves out, of the section or item that lacks it.
		for i := range fe.problems {
			fe.problems[i].Line = lines.of(fe.problems[i].Path)
		}
		slices.SortStableFunc(fe.problems, func(a, b Problem) int { return cmp.Compare(a.Line, b.Line) })
		return nil, &Error{Source: source, Problems: fe.problems}
	}
	cfg.BMCs = bmcs
	return cfg, nil
}

// Error is every problem found in one configuration file.
type Error struct {
	Source   string
	Problems []Problem
}

// Error is one line for one problem, else a line per problem under a
// heading, so that no message runs into the next.
func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return fmt.Sprintf("config %s: %s", e.Source, e.Problems[0].Error())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config %s: %d problems:", e.Source, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.Error())
	}
	return b.String()
}

// cleanDecodeError strips the JSON-conversion wording sigs.k8s.io/yaml adds,
// so users read `unknown field "adress"` rather than decoder internals.
func cleanDecodeError(err error) string {
	msg := err.Error()
	for _, prefix := range []string{"error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
		msg = strings.ReplaceAll(msg, prefix, "")
	}
	return msg
}
