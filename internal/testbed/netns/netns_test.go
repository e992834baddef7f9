package netns

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The test binary re-executes itself inside a namespace to dial or listen
// there, so the test needs no tools beyond iproute2.
func TestMain(m *testing.M) {
	switch mode := os.Getenv("NETNS_HELPER"); {
	case strings.HasPrefix(mode, "dial="):
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(mode, "dial="), time.Second)
		if err != nil {
			fmt.Println("unreachable")
			os.Exit(0)
		}
		c.Close()
		fmt.Println("reachable")
		os.Exit(0)
	case strings.HasPrefix(mode, "listen="):
		l, err := net.Listen("tcp", strings.TrimPrefix(mode, "listen="))
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("listening")
		for {
			c, err := l.Accept()
			if err == nil {
				c.Close()
			}
		}
	}
	os.Exit(m.Run())
}

func requireRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: creates network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for ip netns")
	}
}

// dialFrom reports whether h can open a TCP connection to addr.
func dialFrom(t *testing.T, h *Host, addr string) bool {
	t.Helper()
	cmd := h.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NETNS_HELPER=dial="+addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dial helper: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out)) == "reachable"
}

// listenIn starts a TCP listener inside h on port and returns its address.
func listenIn(t *testing.T, h *Host, port int) string {
	t.Helper()
	addr := fmt.Sprintf("%s:%d", h.Addr, port)
	cmd := h.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NETNS_HELPER=listen="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "listening") {
		t.Fatalf("listener in %s: %q", h.Name, buf[:n])
	}
	return addr
}

func TestPartitions(t *testing.T) {
	requireRoot(t)
	n, err := New("198.18.250.0/24")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	a, err := n.AddHost("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.AddHost("b")
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr.String() != "198.18.250.10" || b.Addr.String() != "198.18.250.11" {
		t.Fatalf("addresses %s %s", a.Addr, b.Addr)
	}
	api, err := net.Listen("tcp", n.Gateway.String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.Close() })
	go func() {
		for {
			c, err := api.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	apiAddr := api.Addr().String()
	peerB := listenIn(t, b, 7946)
	peerA := listenIn(t, a, 7946)

	type reach struct{ aAPI, aB, bA, bAPI bool }
	check := func(step string, want reach) {
		t.Helper()
		got := reach{dialFrom(t, a, apiAddr), dialFrom(t, a, peerB), dialFrom(t, b, peerA), dialFrom(t, b, apiAddr)}
		if got != want {
			t.Fatalf("%s: reachability %+v, want %+v", step, got, want)
		}
	}
	check("connected", reach{true, true, true, true})
	steps := []struct {
		name string
		do   func() error
		want reach
	}{
		{"partition a from API", a.PartitionFromAPI, reach{false, true, true, true}},
		{"heal", a.Heal, reach{true, true, true, true}},
		{"partition a from peers", a.PartitionFromPeers, reach{true, false, false, true}},
		{"heal", a.Heal, reach{true, true, true, true}},
		{"isolate a", a.Isolate, reach{false, false, false, true}},
		{"isolate a twice is fine", a.Isolate, reach{false, false, false, true}},
		{"heal", a.Heal, reach{true, true, true, true}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		check(s.name, s.want)
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	requireRoot(t)
	n, err := New("198.18.251.0/24")
	if err != nil {
		t.Fatal(err)
	}
	h, err := n.AddHost("x")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), h.Namespace) {
		t.Fatalf("namespace %s left behind", h.Namespace)
	}
	if _, err := os.Stat("/etc/netns/" + h.Namespace); err == nil {
		t.Fatalf("/etc/netns/%s left behind", h.Namespace)
	}
	if err := exec.Command("ip", "link", "show", n.bridge).Run(); err == nil {
		t.Fatalf("bridge %s left behind", n.bridge)
	}
}

func TestFreeSubnetAvoidsRoutedOnes(t *testing.T) {
	requireRoot(t)
	n, err := New("198.18.252.0/24")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	if _, err := New("198.18.252.0/24"); err == nil || !strings.Contains(err.Error(), "already routed") {
		t.Fatalf("second New on the same subnet: %v", err)
	}
	for range 50 {
		s, err := FreeSubnet()
		if err != nil || s == "198.18.252.0/24" || !strings.HasPrefix(s, "198.1") {
			t.Fatalf("FreeSubnet = %q, %v", s, err)
		}
	}
}

func TestRejectsAddressesOutsideTestRange(t *testing.T) {
	for _, s := range []string{"10.0.0.0/24", "192.168.1.0/24", "198.18.0.0/16", "198.20.0.0/24"} {
		if _, err := New(s); err == nil {
			t.Errorf("New(%s) accepted", s)
		}
	}
}
