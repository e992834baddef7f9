package heartbeat

import (
	"encoding/base64"
	"fmt"
	"net"
)

// Bounds on what a peer sends. memberlist's metadata limit (MaxMetaSize)
// binds only what a member sends about itself: a receiver takes node
// states of any size in a push/pull of up to 20 MB, and member names of
// any length. Every byte of them may come from any holder of the gossip
// key, so every decoder of peer bytes in this package checks the sizes
// below before it keeps, compares or logs anything.
const (
	// maxNameLen is a member (Kubernetes node) name: a DNS subdomain.
	maxNameLen = 253
	// maxBootIDLen is a boot ID (/proc/sys/kernel/random/boot_id is 36
	// characters), with room for other platforms' forms.
	maxBootIDLen = 128
	// maxWordLen is a role or an announced state.
	maxWordLen = 32
	// maxAgentLen is the fenced version string.
	maxAgentLen = 128
	// maxSigLen is a signature (ed25519's is 64 bytes), and maxSigText the
	// same in standard base64.
	maxSigLen = 128
	// maxAddrLen is a reply address "host:port": a bracketed IPv6 address
	// with a zone and a port fits.
	maxAddrLen = 96
)

// maxSigText is maxSigLen bytes in standard base64.
var maxSigText = base64.StdEncoding.EncodedLen(maxSigLen)

// field is one decoded value and its bound, for fieldsFit.
type field struct {
	name string
	len  int
	max  int
}

// fieldsFit returns an error naming the first field over its bound.
func fieldsFit(fields ...field) error {
	for _, f := range fields {
		if f.len > f.max {
			return fmt.Errorf("heartbeat: %s is %d bytes; the limit is %d", f.name, f.len, f.max)
		}
	}
	return nil
}

// oversizedPeer is why a peer's member state is refused before anything
// in it is decoded, or "" when its name, address and metadata are within
// bounds.
func oversizedPeer(name string, addr net.IP, meta []byte) string {
	switch {
	case len(name) > maxNameLen:
		return fmt.Sprintf("member name is %d bytes; the limit is %d", len(name), maxNameLen)
	case len(addr) > net.IPv6len:
		// net.IP.String would print it as hex, twice its size.
		return fmt.Sprintf("address is %d bytes; an IP address has at most %d", len(addr), net.IPv6len)
	case len(meta) > MaxMetaSize:
		return fmt.Sprintf("metadata is %d bytes; memberlist's limit is %d", len(meta), MaxMetaSize)
	}
	return ""
}
