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

	"fenced.io/fenced/pkg/config"
)

// Config's zero values take the defaults of pkg/config (the one table of
// defaults): memberlist's LAN profile and port.

// Config tunes the ring. Zero values take the defaults above.
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
	// bytes). Required unless Insecure is set.
	SecretKey []byte
	// Insecure allows gossip without encryption (--insecure-gossip):
	// anyone on the network could then pose as a member.
	Insecure bool

	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspicionMult  int
	GossipInterval time.Duration
}

// MemberlistConfig validates c and returns the memberlist configuration it
// stands for.
func (c Config) MemberlistConfig() (*memberlist.Config, error) {
	if c.NodeName == "" {
		return nil, errors.New("heartbeat: node name is required")
	}
	if !c.Insecure {
		switch len(c.SecretKey) {
		case 16, 24, 32:
		case 0:
			return nil, errors.New("heartbeat: no gossip encryption key: provide one (16, 24 or 32 bytes) or pass --insecure-gossip")
		default:
			return nil, fmt.Errorf("heartbeat: gossip key is %d bytes; want 16, 24 or 32", len(c.SecretKey))
		}
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.NodeName
	mc.Label = c.ClusterName
	if !c.Insecure {
		mc.SecretKey = c.SecretKey
	}
	if c.BindAddr != "" {
		mc.BindAddr = c.BindAddr
	}
	mc.BindPort = orDefault(c.BindPort, config.DefaultGossipPort)
	mc.AdvertisePort = mc.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.ProbeInterval = orDefault(c.ProbeInterval, config.DefaultGossipProbeInterval)
	mc.ProbeTimeout = orDefault(c.ProbeTimeout, config.DefaultGossipProbeTimeout)
	mc.SuspicionMult = orDefault(c.SuspicionMult, config.DefaultGossipSuspicionMult)
	mc.GossipInterval = orDefault(c.GossipInterval, config.DefaultGossipInterval)
	if mc.ProbeTimeout >= mc.ProbeInterval {
		return nil, fmt.Errorf("heartbeat: probe timeout %s must be shorter than the probe interval %s", mc.ProbeTimeout, mc.ProbeInterval)
	}
	return mc, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
