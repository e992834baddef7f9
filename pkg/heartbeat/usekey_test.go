package heartbeat

import (
	"context"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/vocab"
)

// TestUseKey: a ring started without a key signs nothing — its metadata,
// its answers to challenges — until UseKey; then its metadata goes out
// signed with that key at once, and so does everything after it. Before
// Join, UseKey signs the metadata the join carries.
func TestUseKey(t *testing.T) {
	key := newKey(t)
	a := start(t, fastConfig(t, "a", 0), Options{})
	f := start(t, fastConfig(t, "fencer", 0), Options{Seeds: seedsOf(a.LocalAddr())})
	poll.Until(t, settle, "a sees the fencer", func() bool { m, ok := a.Member("fencer"); return ok && m.State == vocab.MemberAlive })

	m, _ := f.Member("a")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	p, err := f.Challenge(ctx, "a", a.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	if m.Meta.Sig != "" || len(p.Sig) != 0 {
		t.Fatalf("a signed before UseKey: meta %+v, proof %+v", m.Meta, p)
	}

	if err := a.UseKey(key); err != nil {
		t.Fatal(err)
	}
	m = waitEvent(t, f, settle, "a's metadata signed", func(m Member) bool { return m.Name == "a" && m.Meta.Sig != "" })
	if !key.Public().Verify(m.Meta.Statement(), m.Meta.Signature()) || m.Meta.State != vocab.AnnounceRunning {
		t.Fatalf("a's metadata after UseKey: %+v", m.Meta)
	}
	if p, err = f.Challenge(ctx, "a", a.LocalAddr()); err != nil || !key.Public().Verify(p.Statement(), p.Sig) {
		t.Fatalf("a's proof after UseKey: %+v, %v", p, err)
	}
	if err := a.Announce(vocab.AnnounceShuttingDown); err != nil {
		t.Fatal(err)
	}
	m = waitEvent(t, f, settle, "a shutting down", func(m Member) bool { return m.Name == "a" && m.Meta.State == vocab.AnnounceShuttingDown })
	if !key.Public().Verify(m.Meta.Statement(), m.Meta.Signature()) {
		t.Fatalf("a's announcement after UseKey is not signed: %+v", m.Meta)
	}

	// Before Join: the join carries signed metadata.
	b, err := New(fastConfig(t, "b", 0), Options{Meta: testMeta("boot-b"), Seeds: seedsOf(f.LocalAddr()), Logger: testLogger(t, "b")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown() })
	if err := b.UseKey(key); err != nil {
		t.Fatal(err)
	}
	if err := b.Join(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "the fencer sees b signed", func() bool {
		m, ok := f.Member("b")
		return ok && m.State == vocab.MemberAlive && key.Public().Verify(m.Meta.Statement(), m.Meta.Signature())
	})

	b.Shutdown()
	if err := b.UseKey(key); err == nil {
		t.Fatal("UseKey after Shutdown succeeded")
	}
	if err := b.UseKey(nil); err == nil {
		t.Fatal("UseKey(nil) succeeded")
	}
}
