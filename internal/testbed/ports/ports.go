// Package ports picks free ports for the servers tests start (API server,
// etcd, BMC simulators, gossip).
//
// A port the kernel hands out for ":0" comes from the ephemeral range
// (ip_local_port_range), the same range it draws the source ports of
// outgoing connections from. Between the probe and the server's bind, any
// of the many connections a test run makes can take it as a source port,
// and the server fails with "address already in use". Ports below the
// ephemeral range are never taken that way, so Free picks them there.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// span is how many ports below the ephemeral range Free draws from.
const span = 10000

// remembered is how many of the ports it handed out last Free never hands
// out again in this process: a port is free again once Free closes its
// probe, but the server it was chosen for may not have bound it yet (an
// API server picked after its etcd, before etcd listens, drew etcd's port).
const remembered = 2000

// given are the ports Free handed out last, at most remembered of them,
// oldest first.
var given struct {
	sync.Mutex
	ports []int
}

// Free returns n distinct ports that were free on addr for network ("tcp"
// or "udp"), below the kernel's ephemeral range, and that no other call
// returned recently in this process. All n are held until the last is
// chosen, so none is returned twice.
func Free(network, addr string, n int) ([]int, error) {
	given.Lock()
	defer given.Unlock()
	lo, hi := candidates()
	var (
		ports   []int
		closers []func()
	)
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no free %s port on %s in %d-%d after %d tries", network, addr, lo, hi, tries)
		}
		p := lo + rand.IntN(hi-lo+1)
		if slices.Contains(given.ports, p) {
			continue
		}
		hostPort := net.JoinHostPort(addr, strconv.Itoa(p))
		switch network {
		case "tcp":
			l, err := net.Listen("tcp", hostPort)
			if err != nil {
				continue
			}
			closers = append(closers, func() { l.Close() })
		case "udp":
			c, err := net.ListenPacket("udp", hostPort)
			if err != nil {
				continue
			}
			closers = append(closers, func() { c.Close() })
		default:
			return nil, fmt.Errorf("unknown network %q", network)
		}
		ports = append(ports, p)
	}
	given.ports = append(given.ports, ports...)
	if extra := len(given.ports) - remembered; extra > 0 {
		given.ports = slices.Delete(given.ports, 0, extra)
	}
	return ports, nil
}

// candidates is the range below the ephemeral one (Linux default
// 32768-60999, so 22768-32767).
func candidates() (lo, hi int) {
	ephemeralLow := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				ephemeralLow = v
			}
		}
	}
	hi = ephemeralLow - 1
	lo = max(hi-span+1, 1024)
	return lo, hi
}
