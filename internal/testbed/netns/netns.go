// Package netns gives each test machine its own network namespace on a
// shared bridge, so scenarios can cut a machine from the API server, from
// its peers, or from both, while its BMC stays reachable on loopback of
// the root namespace (the management side).
//
// Addresses come from 198.18.0.0/15 (reserved for benchmarking): the bridge
// is .1 of a /24 and holds the API server's address; machines get .10, .11, …
// Partitions are blackhole routes inside the machine's namespace: the
// machine can no longer send to the blackholed address, so neither TCP
// connections nor gossip probes in either direction complete.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Network is a bridge in the root namespace and the machines attached to it.
type Network struct {
	// Gateway is the bridge's address: processes in the root namespace
	// (the control plane) listen here to be reachable from machines.
	Gateway netip.Addr
	// Prefix is the machines' subnet.
	Prefix netip.Prefix

	id     string // short random suffix keeping names unique per test
	bridge string

	mu    sync.Mutex
	hosts []*Host
}

// Host is one machine's network namespace.
type Host struct {
	Name      string     // machine name
	Namespace string     // `ip netns` name
	Addr      netip.Addr // the machine's address on the bridge

	net  *Network
	veth string

	mu         sync.Mutex
	blackholes map[netip.Addr]bool
	loss       float64 // the fraction Lose set
}

// New creates a bridge with subnet (a /24 inside 198.18.0.0/15, e.g.
// "198.18.7.0/24"). Call Close to remove it and every namespace.
func New(subnet string) (*Network, error) {
	prefix, err := netip.ParsePrefix(subnet)
	if err != nil {
		return nil, err
	}
	if out, _ := exec.Command("ip", "-4", "route", "show", prefix.Masked().String()).Output(); len(strings.TrimSpace(string(out))) > 0 {
		return nil, fmt.Errorf("netns: %s is already routed on this host", prefix.Masked())
	}
	if prefix.Bits() != 24 || !netip.MustParsePrefix("198.18.0.0/15").Contains(prefix.Addr()) {
		return nil, fmt.Errorf("netns: %s is not a /24 inside 198.18.0.0/15", subnet)
	}
	if fwd, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err != nil || strings.TrimSpace(string(fwd)) != "0" {
		// Machines get a default route via the bridge; with forwarding on,
		// their stray traffic could leave this host.
		return nil, errors.New("netns: IPv4 forwarding is enabled in the root namespace; refusing to attach test machines")
	}
	n := &Network{Prefix: prefix.Masked(), Gateway: prefix.Masked().Addr().Next(), id: randomID()}
	n.bridge = "fnb" + n.id
	steps := [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		{"addr", "add", n.Gateway.String() + "/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			_ = ip("link", "del", n.bridge)
			return nil, err
		}
	}
	return n, nil
}

// FreeSubnet returns a /24 of 198.18.0.0/15 that no route of the root
// namespace covers yet, chosen at random so that concurrent test binaries
// rarely race for the same one (New fails if they do).
func FreeSubnet() (string, error) {
	out, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		return "", fmt.Errorf("ip route show: %w", err)
	}
	used := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			used[f[0]] = true
		}
	}
	for range 100 {
		// 198.18.10.0 to 198.19.245.0: skip the low and high ends, where
		// hand-written tests put fixed subnets.
		n := 10 + mathrand.IntN(492)
		subnet := fmt.Sprintf("198.%d.%d.0/24", 18+n/256, n%256)
		if !used[subnet] {
			return subnet, nil
		}
	}
	return "", errors.New("netns: no free /24 found in 198.18.0.0/15")
}

// AddHost creates a namespace for machine name with the next free address.
func (n *Network) AddHost(name string) (*Host, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	addr := n.Gateway
	for i := 0; i < 9+len(n.hosts); i++ {
		addr = addr.Next()
	}
	if !n.Prefix.Contains(addr) {
		return nil, errors.New("netns: subnet is full")
	}
	h := &Host{
		Name:       name,
		Namespace:  fmt.Sprintf("fenced-%s-%s", n.id, name),
		Addr:       addr,
		net:        n,
		veth:       fmt.Sprintf("fnv%s%d", n.id, len(n.hosts)),
		blackholes: map[netip.Addr]bool{},
	}
	steps := [][]string{
		{"netns", "add", h.Namespace},
		{"link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.Namespace},
		{"link", "set", h.veth, "master", n.bridge, "up"},
		{"-n", h.Namespace, "addr", "add", addr.String() + "/24", "dev", "eth0"},
		{"-n", h.Namespace, "link", "set", "eth0", "up"},
		{"-n", h.Namespace, "link", "set", "lo", "up"},
		// The kubelet picks its node IP from the default route's interface.
		// The root namespace does not forward (ip_forward=0 is checked in
		// New), so this route cannot carry traffic past the bridge.
		{"-n", h.Namespace, "route", "add", "default", "via", n.Gateway.String()},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			h.remove()
			return nil, err
		}
	}
	// `ip netns exec` bind-mounts /etc/netns/<ns>/* over /etc: the machine
	// resolves its own name to its own address, and any other DNS lookup
	// goes to the namespace's loopback, where nothing answers.
	etc := filepath.Join("/etc/netns", h.Namespace)
	hosts := fmt.Sprintf("127.0.0.1 localhost\n%s %s\n", addr, name)
	if err := errors.Join(os.MkdirAll(etc, 0o755),
		os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts), 0o644),
		os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644)); err != nil {
		h.remove()
		return nil, err
	}
	n.hosts = append(n.hosts, h)
	return h, nil
}

// Command returns a command that runs inside the host's namespace.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Namespace, name}, args...)...)
}

// NetCommand returns a command that enters only the host's network
// namespace (nsenter --net). Command's `ip netns exec` also gives it a
// mount namespace with /sys remounted for the network namespace, which
// hides the host's cgroup hierarchies: the kubelet and containerd of a
// real node (package realnode) need them.
func (h *Host) NetCommand(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + h.Namespace, "--", name}, args...)...)
}

// Wrap returns argv prefixed so that it runs inside the namespace, for
// places that take a command line (such as ipmi_sim's startcmd).
func (h *Host) Wrap(argv ...string) []string {
	return append([]string{"ip", "netns", "exec", h.Namespace}, argv...)
}

// PartitionFromAPI cuts the host from the control plane (the gateway).
func (h *Host) PartitionFromAPI() error { return h.block(h.net.Gateway) }

// PartitionFromPeers cuts the host from every other machine on the bridge
// (present and future ones are not tracked: call it after all hosts exist).
func (h *Host) PartitionFromPeers() error {
	for _, p := range h.net.peersOf(h) {
		if err := h.block(p.Addr); err != nil {
			return err
		}
		// Both directions: a peer must not reach this host either, or the
		// peer's TCP fallback probes would still get through.
		if err := p.block(h.Addr); err != nil {
			return err
		}
	}
	return nil
}

// Isolate cuts the host from the control plane and from its peers.
func (h *Host) Isolate() error {
	if err := h.PartitionFromAPI(); err != nil {
		return err
	}
	return h.PartitionFromPeers()
}

// Heal removes every partition involving this host.
func (h *Host) Heal() error {
	var errs []error
	errs = append(errs, h.unblockAll())
	for _, p := range h.net.peersOf(h) {
		errs = append(errs, p.unblock(h.Addr))
	}
	return errors.Join(errs...)
}

// Lose drops the fraction loss (0 to 1) of the packets the host sends and
// of those it receives on its link to the bridge, at random (iptables'
// statistic match: this kernel has no netem). 0 removes the loss.
func (h *Host) Lose(loss float64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	chains := []string{"INPUT", "OUTPUT"}
	if h.loss > 0 {
		for _, chain := range chains {
			if out, err := h.iptables("-D", chain, lossRule(chain, h.loss)...); err != nil {
				return fmt.Errorf("netns: remove the packet loss on %s: %v: %s", h.Name, err, out)
			}
		}
		h.loss = 0
	}
	if loss <= 0 {
		return nil
	}
	for _, chain := range chains {
		if out, err := h.iptables("-A", chain, lossRule(chain, loss)...); err != nil {
			return fmt.Errorf("netns: packet loss on %s: %v: %s", h.Name, err, out)
		}
	}
	h.loss = loss
	return nil
}

// LossDropped is how many packets the loss set by Lose has dropped, both
// ways (iptables' counters of its rules).
func (h *Host) LossDropped() (int64, error) {
	var n int64
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		out, err := exec.Command("ip", "netns", "exec", h.Namespace, "iptables", "-w", "-L", chain, "-v", "-x", "-n").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("netns: iptables counters of %s: %v: %s", h.Name, err, out)
		}
		for line := range strings.Lines(string(out)) {
			if f := strings.Fields(line); len(f) > 2 && f[2] == "DROP" && strings.Contains(line, "statistic") {
				v, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("netns: iptables counters of %s: %q: %v", h.Name, line, err)
				}
				n += v
			}
		}
	}
	return n, nil
}

func lossRule(chain string, loss float64) []string {
	dir := "-i"
	if chain == "OUTPUT" {
		dir = "-o"
	}
	return []string{dir, "eth0", "-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(loss, 'f', -1, 64), "-j", "DROP"}
}

func (h *Host) iptables(op, chain string, rule ...string) ([]byte, error) {
	return exec.Command("ip", append([]string{"netns", "exec", h.Namespace, "iptables", "-w", op, chain}, rule...)...).CombinedOutput()
}

func (h *Host) block(addr netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.blackholes[addr] {
		return nil
	}
	if err := ip("-n", h.Namespace, "route", "add", "blackhole", addr.String()+"/32"); err != nil {
		return err
	}
	h.blackholes[addr] = true
	return nil
}

func (h *Host) unblock(addr netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.blackholes[addr] {
		return nil
	}
	delete(h.blackholes, addr)
	return ip("-n", h.Namespace, "route", "del", "blackhole", addr.String()+"/32")
}

func (h *Host) unblockAll() error {
	h.mu.Lock()
	addrs := make([]netip.Addr, 0, len(h.blackholes))
	for a := range h.blackholes {
		addrs = append(addrs, a)
	}
	h.mu.Unlock()
	var errs []error
	for _, a := range addrs {
		errs = append(errs, h.unblock(a))
	}
	return errors.Join(errs...)
}

func (n *Network) peersOf(h *Host) []*Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	var peers []*Host
	for _, p := range n.hosts {
		if p != h {
			peers = append(peers, p)
		}
	}
	return peers
}

func (h *Host) remove() {
	_ = ip("link", "del", h.veth)
	_ = ip("netns", "del", h.Namespace)
	_ = os.RemoveAll(filepath.Join("/etc/netns", h.Namespace))
}

// Close removes every namespace and the bridge. Processes still running in
// a namespace keep it alive until they exit; the harness stops them first.
func (n *Network) Close() error {
	n.mu.Lock()
	hosts := n.hosts
	n.hosts = nil
	n.mu.Unlock()
	for _, h := range hosts {
		h.remove()
	}
	return ip("link", "del", n.bridge)
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func randomID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
