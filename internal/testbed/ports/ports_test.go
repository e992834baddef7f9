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
