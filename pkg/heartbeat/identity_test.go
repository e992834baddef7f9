package heartbeat

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/vocab"
)

func newKey(t *testing.T) *identity.Key {
	t.Helper()
	k, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSignedAnnouncementsAndLeave: an agent with a key signs its metadata
// on every announcement, with a growing sequence number, and its leave
// notice; the others see statements that verify against its key only.
func TestSignedAnnouncementsAndLeave(t *testing.T) {
	key := newKey(t)
	a := start(t, fastConfig(t, "a", 0), Options{Key: key})
	b := start(t, fastConfig(t, "b", 0), Options{Seeds: seedsOf(a.LocalAddr())})
	poll.Until(t, settle, "b sees a", func() bool { m, ok := b.Member("a"); return ok && m.State == vocab.MemberAlive })

	m, _ := b.Member("a")
	if !key.Public().Verify(m.Meta.Statement(), m.Meta.Signature()) || m.Meta.Seq != 1 {
		t.Fatalf("a's first metadata is not signed as statement 1: %+v", m.Meta)
	}
	other := newKey(t)
	if other.Public().Verify(m.Meta.Statement(), m.Meta.Signature()) {
		t.Fatal("a's signature verifies against another key")
	}
	var last uint64 = 1
	for _, state := range []vocab.Announcement{vocab.AnnounceShuttingDown, vocab.AnnounceShutdownComplete} {
		if err := a.Announce(state); err != nil {
			t.Fatal(err)
		}
		m := waitEvent(t, b, settle, "a announces "+string(state), func(m Member) bool { return m.Name == "a" && m.Meta.State == state })
		if !key.Public().Verify(m.Meta.Statement(), m.Meta.Signature()) || m.Meta.Seq <= last {
			t.Fatalf("announcement %s: seq %d (last %d), signature valid %v", state, m.Meta.Seq, last,
				key.Public().Verify(m.Meta.Statement(), m.Meta.Signature()))
		}
		// The signature covers the state: the same signature for another
		// state does not verify.
		forged := m.Meta
		forged.State = vocab.AnnounceRunning
		if key.Public().Verify(forged.Statement(), forged.Signature()) {
			t.Fatal("signature verifies for another state")
		}
		last = m.Meta.Seq
	}
	if err := a.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	m = waitEvent(t, b, settle, "a left", func(m Member) bool { return m.Name == "a" && m.State != vocab.MemberAlive })
	if m.State != vocab.MemberLeft || m.Leave.BootID != "boot-a" || m.Leave.Seq <= last ||
		!key.Public().Verify(m.Leave.Statement(), m.Leave.Signature()) {
		t.Fatalf("b sees %+v: want left with a's signed leave notice", m)
	}
}

// TestUnsignedWithoutKey: an agent without a key signs nothing (fencers
// then take none of its word).
func TestUnsignedWithoutKey(t *testing.T) {
	rings := cluster(t, "a", "b")
	m, _ := rings[1].Member("a")
	if m.Meta.Sig != "" || m.Meta.Seq != 0 {
		t.Fatalf("unsigned agent's meta %+v", m.Meta)
	}
}

// TestChallengeProvesLiveness: a challenge sent to a live agent's address
// is answered with a signed proof of the nonce; to an address where no
// agent lives, it fails with ErrNoProof within the caller's deadline.
func TestChallengeProvesLiveness(t *testing.T) {
	key := newKey(t)
	a := start(t, fastConfig(t, "a", 0), Options{Key: key})
	f := start(t, fastConfig(t, "fencer", 0), Options{Seeds: seedsOf(a.LocalAddr())})
	poll.Until(t, settle, "a sees the fencer", func() bool { m, ok := a.Member("fencer"); return ok && m.State == vocab.MemberAlive })

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	p, err := f.Challenge(ctx, "a", a.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	if p.Node != "a" || p.BootID != "boot-a" || len(p.Nonce) != nonceSize || !key.Public().Verify(p.Statement(), p.Sig) {
		t.Fatalf("proof %+v does not verify", p)
	}

	// Nobody there: no proof, and the call returns by its deadline.
	dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	ctx, cancel = context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	began := time.Now()
	if _, err := f.Challenge(ctx, "a", dead); !errors.Is(err, ErrNoProof) {
		t.Fatalf("challenge to an empty address: %v", err)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("challenge took %s past its 1 s deadline", took)
	}
}

// TestChallengeFromOutsideIsIgnored: an agent answers only challenges of
// alive members, sent back to their own address, so a forged challenge
// cannot make it send packets anywhere else.
func TestChallengeFromOutsideIsIgnored(t *testing.T) {
	a := start(t, fastConfig(t, "a", 0), Options{Key: newKey(t)})
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close() })
	connected := make(chan struct{}, 1)
	go func() {
		if c, err := listener.Accept(); err == nil {
			c.Close()
			connected <- struct{}{}
		}
	}()
	for _, c := range []challenge{
		{From: "stranger", ReplyTo: listener.Addr().String(), Nonce: make([]byte, nonceSize)},
		{From: "a", ReplyTo: listener.Addr().String(), Nonce: make([]byte, nonceSize)}, // itself
	} {
		(*delegate)(a).NotifyMsg(encodeMessage(msgChallenge, c))
	}
	select {
	case <-connected:
		t.Fatal("a sent a proof to an address outside the ring")
	case <-time.After(quietFor):
	}
}
