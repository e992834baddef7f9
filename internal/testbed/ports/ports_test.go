package ports

import (
	"net"
	"slices"
	"strconv"
	"testing"
)

func TestFree(t *testing.T) {
	lo, hi := candidates()
	if lo < 1024 || hi <= lo {
		t.Fatalf("candidate range %d-%d", lo, hi)
	}
	for _, network := range []string{"tcp", "udp"} {
		ps, err := Free(network, "127.0.0.1", 5)
		if err != nil {
			t.Fatal(err)
		}
		sorted := slices.Clone(ps)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) != 5 {
			t.Fatalf("%s: ports %v are not distinct", network, ps)
		}
		for _, p := range ps {
			if p < lo || p > hi {
				t.Errorf("%s: port %d outside %d-%d (below the ephemeral range)", network, p, lo, hi)
			}
			// Released: a server can bind it now.
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
			if network == "tcp" {
				l, err := net.Listen("tcp", addr)
				if err != nil {
					t.Fatalf("port %d not free after Free returned: %v", p, err)
				}
				l.Close()
			} else {
				c, err := net.ListenPacket("udp", addr)
				if err != nil {
					t.Fatalf("port %d not free after Free returned: %v", p, err)
				}
				c.Close()
			}
		}
	}
	if _, err := Free("sctp", "127.0.0.1", 1); err == nil {
		t.Error("Free for an unknown network succeeded")
	}
}

// TestFreeNeverHandsOutARecentPortAgain: ports chosen one call at a time
// for servers that bind later (etcd, then the API server) are distinct,
// though each probe is closed before the next call. 500 draws from 10000
// candidates would repeat one almost surely without the memory.
func TestFreeNeverHandsOutARecentPortAgain(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		ps, err := Free("tcp", "127.0.0.1", 1)
		if err != nil {
			t.Fatal(err)
		}
		if seen[ps[0]] {
			t.Fatalf("port %d handed out twice", ps[0])
		}
		seen[ps[0]] = true
	}
}
