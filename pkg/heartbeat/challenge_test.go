package heartbeat

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/vocab"
)

// blackhole listens for TCP on 127.0.0.1 with an accept queue that is
// full and never drained: further SYNs are dropped, so a dial there hangs
// until its own timeout — an address that drops SYNs, on loopback. It
// returns the address.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
	// Fill the accept queue; the connections stay open until the test ends.
	for range 4 {
		d := net.Dialer{Timeout: 200 * time.Millisecond}
		if c, err := d.Dial("tcp", addr); err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	return addr
}

// apiAddrs is a ChallengerAddrs from a fixed table: what the Kubernetes API
// says each Node's gossip address is.
func apiAddrs(table map[string]string) func(string) []string {
	return func(name string) []string {
		if a, ok := table[name]; ok {
			return []string{a}
		}
		return nil
	}
}

// TestForgedFencerDeathDoesNotSilenceTheAgent: a forged "the fencer is
// dead" (at memberlist's top incarnation nobody can refute it) must not
// make an agent ignore the fencer's challenges: who may challenge is the
// API's word, not gossip's.
func TestForgedFencerDeathDoesNotSilenceTheAgent(t *testing.T) {
	fcfg, acfg := fastConfig(t, "fencer", 0), fastConfig(t, "a", 0)
	table := map[string]string{"fencer": "127.0.0.1:" + strconv.Itoa(fcfg.BindPort), "a": "127.0.0.1:" + strconv.Itoa(acfg.BindPort)}
	a := start(t, acfg, Options{Key: newKey(t), ChallengerAddrs: apiAddrs(table)})
	f := start(t, fcfg, Options{Seeds: seedsOf(a.LocalAddr()), ChallengerAddrs: apiAddrs(table)})
	poll.Until(t, settle, "a sees the fencer", stateIs(a, "fencer", vocab.MemberAlive))
	// The forged dead, as a's view records it.
	a.mu.Lock()
	a.members["fencer"].State = vocab.MemberDead
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := f.Challenge(ctx, "a", a.LocalAddr()); err != nil {
		t.Fatalf("the agent, told the fencer is dead, left its challenge unanswered: %v", err)
	}
}

// TestGhostChallengesCannotStarveTheFencer: challenges forged in the name
// of a Node whose address drops SYNs (each proof to it would wait for the
// TCP timeout) must not use up the capacity the genuine fencer's
// challenges need.
func TestGhostChallengesCannotStarveTheFencer(t *testing.T) {
	ghost := blackhole(t)
	fcfg, acfg := fastConfig(t, "fencer", 0), fastConfig(t, "a", 0)
	table := map[string]string{"fencer": "127.0.0.1:" + strconv.Itoa(fcfg.BindPort), "a": "127.0.0.1:" + strconv.Itoa(acfg.BindPort), "ghost": ghost}
	a := start(t, acfg, Options{Key: newKey(t), ChallengerAddrs: apiAddrs(table)})
	f := start(t, fcfg, Options{Seeds: seedsOf(a.LocalAddr()), ChallengerAddrs: apiAddrs(table)})
	poll.Until(t, settle, "a sees the fencer", stateIs(a, "fencer", vocab.MemberAlive))
	// The ghost is a Node (and, for gossip, an alive member at its address).
	a.mu.Lock()
	a.members["ghost"] = &Member{Name: "ghost", State: vocab.MemberAlive, Addr: ghost}
	a.mu.Unlock()

	answered := 0
	const genuine = 10
	for i := range genuine {
		// A burst of ghost challenges before each genuine one.
		for range 20 {
			nonce := make([]byte, nonceSize)
			nonce[0] = byte(i)
			(*delegate)(a).NotifyMsg(encodeMessage(msgChallenge, challenge{From: "ghost", ReplyTo: ghost, Nonce: nonce}))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		if _, err := f.Challenge(ctx, "a", a.LocalAddr()); err == nil {
			answered++
		}
		cancel()
	}
	if answered != genuine {
		t.Fatalf("%d of %d genuine challenges answered under a flood of ghost challenges", answered, genuine)
	}
}
