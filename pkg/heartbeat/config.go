// Package heartbeat owns the gossip ring (hashicorp/memberlist) through
// which agents see each other's liveness: joining, member metadata, the
// encryption key and label, the member view and a clean leave.
//
// Gossip only raises suspicion. Any holder of the shared key can say
// anything in any member's name, so a member the ring declares dead costs
// one BMC read, never a taint, and the ring may be tuned for fast
// detection. What a node says about itself that fencers act on — its
// clean-shutdown announcement, its leave, its answer to a liveness
// challenge — is signed with that agent's own key (pkg/identity), which
// fencers check against the key its node published; the ring carries the
// signatures and checks none of them.
package heartbeat

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultPort is the ring's port, TCP and UDP. Not memberlist's 7946:
// MetalLB's speakers and Docker Swarm gossip there on the host network of
// most bare-metal clusters. docs/install.md ("Ports") lists the ports of
// the components checked, and the chart refuses them.
const DefaultPort = 8946

// DefaultConfig is the ring's configuration with every default filled in
// (but no name or key): DefaultPort and memberlist's LAN profile's
// failure-detector timings, under which a dead member is declared after
// about 6 s in a 10-node ring (SuspicionMult × log10(N) × ProbeInterval,
// shortened by confirmations). A false suspicion costs one BMC read, never
// a taint. A Config's zero fields take these values; the configuration
// file (pkg/config, gossip section) overrides them.
func DefaultConfig() Config {
	return Config{
		BindPort:       DefaultPort,
		ProbeInterval:  time.Second,
		ProbeTimeout:   500 * time.Millisecond,
		SuspicionMult:  4,
		GossipInterval: 200 * time.Millisecond,
	}
}

// FastConfig is DefaultConfig with the fast profile's timings
// (gossip.profile: fast), chosen from `make bench-gossip`: a crashed member
// is seen dead by all in ~1-2 s in rings of 10 to 100 on a LAN, for more
// packets and more false suspicions (each one BMC read) than the LAN
// profile; the measurements of make bench-gossip have the figures.
func FastConfig() Config {
	c := DefaultConfig()
	c.ProbeInterval, c.ProbeTimeout = 300*time.Millisecond, 150*time.Millisecond
	c.SuspicionMult, c.GossipInterval = 3, 100*time.Millisecond
	return c
}

// Config tunes the ring. Zero values take DefaultConfig's.
type Config struct {
	// NodeName is this member's name: the Kubernetes node name.
	NodeName string
	// BindAddr and BindPort are where gossip listens (UDP and TCP).
	BindAddr string
	BindPort int
	// AdvertiseAddr is the address peers use to reach this member
	// (default: the address memberlist picks from BindAddr).
	AdvertiseAddr string
	// ClusterName becomes memberlist's Label: packets of another cluster's
	// ring are dropped even when they share a network and a key.
	ClusterName string
	// SecretKey encrypts and authenticates gossip (AES-GCM; 16, 24 or 32
	// bytes): the primary key. Required unless Insecure is set.
	SecretKey []byte
	// SecondaryKeys decrypt only: the keys of a rotation under way
	// (keys.go). Ring.SetKeys replaces both at run time.
	SecondaryKeys [][]byte
	// Insecure allows gossip without encryption (--insecure-gossip):
	// anyone on the network could then pose as a member.
	Insecure bool

	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspicionMult  int
	GossipInterval time.Duration
	// BeatInterval is how often this agent beats to each fencer, whose
	// Detector learns each member's pace from the beats (beats.go): 0
	// means DefaultBeatInterval, a negative value no beats.
	BeatInterval time.Duration
}

// MemberlistConfig validates c and returns the memberlist configuration it
// stands for.
func (c Config) MemberlistConfig() (*memberlist.Config, error) {
	if c.NodeName == "" {
		return nil, errors.New("heartbeat: node name is required")
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.NodeName
	mc.Label = c.ClusterName
	if !c.Insecure {
		keys := c.Keys()
		if err := keys.Validate(); err != nil {
			return nil, err
		}
		// A Keyring, not SecretKey: the ring changes its keys in place
		// (Ring.SetKeys), and memberlist reads them from it per packet.
		kr, err := memberlist.NewKeyring(keys.Secondary, keys.Primary)
		if err != nil {
			return nil, fmt.Errorf("heartbeat: gossip keys: %w", err)
		}
		mc.Keyring = kr
	}
	if c.BindAddr != "" {
		mc.BindAddr = c.BindAddr
	}
	d := DefaultConfig()
	mc.BindPort = orDefault(c.BindPort, d.BindPort)
	mc.AdvertisePort = mc.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.ProbeInterval = orDefault(c.ProbeInterval, d.ProbeInterval)
	mc.ProbeTimeout = orDefault(c.ProbeTimeout, d.ProbeTimeout)
	mc.SuspicionMult = orDefault(c.SuspicionMult, d.SuspicionMult)
	mc.GossipInterval = orDefault(c.GossipInterval, d.GossipInterval)
	if mc.ProbeTimeout >= mc.ProbeInterval {
		return nil, fmt.Errorf("heartbeat: probe timeout %s must be shorter than the probe interval %s", mc.ProbeTimeout, mc.ProbeInterval)
	}
	return mc, nil
}

// Keys is the KeySet of SecretKey and SecondaryKeys.
func (c Config) Keys() KeySet {
	return KeySet{Primary: c.SecretKey, Secondary: c.SecondaryKeys}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
