package identity

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

func TestSignVerify(t *testing.T) {
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewKey()
	s := Statement{Kind: KindState, Node: "worker-1", BootID: "boot-1", State: "shutdown-complete", Seq: 7}
	sig := k.Sign(s)
	if !k.Public().Verify(s, sig) {
		t.Fatal("own signature does not verify")
	}
	changed := []struct {
		name string
		s    Statement
	}{
		{"kind", Statement{Kind: KindLeave, Node: "worker-1", BootID: "boot-1", State: "shutdown-complete", Seq: 7}},
		{"node", Statement{Kind: KindState, Node: "worker-2", BootID: "boot-1", State: "shutdown-complete", Seq: 7}},
		{"boot", Statement{Kind: KindState, Node: "worker-1", BootID: "boot-0", State: "shutdown-complete", Seq: 7}},
		{"state", Statement{Kind: KindState, Node: "worker-1", BootID: "boot-1", State: "running", Seq: 7}},
		{"seq", Statement{Kind: KindState, Node: "worker-1", BootID: "boot-1", State: "shutdown-complete", Seq: 8}},
		{"nonce", Statement{Kind: KindState, Node: "worker-1", BootID: "boot-1", State: "shutdown-complete", Seq: 7, Nonce: []byte{1}}},
		// Moving bytes between fields must not give the same encoding.
		{"shifted", Statement{Kind: KindState, Node: "worker-1b", BootID: "oot-1", State: "shutdown-complete", Seq: 7}},
	}
	for _, c := range changed {
		if k.Public().Verify(c.s, sig) {
			t.Errorf("signature verifies for a statement with another %s", c.name)
		}
	}
	if other.Public().Verify(s, sig) {
		t.Error("signature verifies against another key")
	}
	for _, bad := range [][]byte{nil, sig[:10], append(bytes.Clone(sig), 0)} {
		if k.Public().Verify(s, bad) {
			t.Errorf("malformed signature of %d bytes verifies", len(bad))
		}
	}
	if PublicKey(nil).Verify(s, sig) {
		t.Error("empty key verifies")
	}
}

func TestPublicKeyText(t *testing.T) {
	k, _ := NewKey()
	got, err := ParsePublicKey(k.Public().String())
	if err != nil || !bytes.Equal(got, k.Public()) {
		t.Fatalf("round trip: %v, %v", got, err)
	}
	for _, bad := range []string{"", "ed25519:", "rsa:AAAA", "ed25519:!!!", "ed25519:AAAA", k.Public().String()[len("ed25519:"):]} {
		if _, err := ParsePublicKey(bad); err == nil {
			t.Errorf("ParsePublicKey(%q) accepted", bad)
		}
	}
}

// FuzzStatementBytes: the signed encoding is injective — two statements
// that differ anywhere never share bytes, so a signature of one is never
// a signature of another. (Armed is part of armed statements only.)
func FuzzStatementBytes(f *testing.F) {
	f.Add(uint8(1), "worker-1", "boot-1", "shutdown-complete", uint64(3), []byte(nil), int64(0), int64(0), "", false,
		uint8(1), "worker-1b", "oot-1", "shutdown-complete", uint64(3), []byte(nil), int64(0), int64(0), "", false)
	f.Add(uint8(KindArmed), "worker-1", "boot-1", "", uint64(0), []byte(nil), int64(10e9), int64(30e9), "i6300ESB timer", false,
		uint8(KindArmed), "worker-1", "boot-1", "", uint64(0), []byte(nil), int64(30e9), int64(10e9), "i6300ESB timer", false)
	f.Fuzz(func(t *testing.T, k1 uint8, n1, b1, s1 string, q1 uint64, x1 []byte, w1, c1 int64, d1 string, soft1 bool,
		k2 uint8, n2, b2, s2 string, q2 uint64, x2 []byte, w2, c2 int64, d2 string, soft2 bool) {
		a := Statement{Kind(k1), n1, b1, vocab.Announcement(s1), q1, x1, Armed{time.Duration(w1), time.Duration(c1), d1, soft1}}
		b := Statement{Kind(k2), n2, b2, vocab.Announcement(s2), q2, x2, Armed{time.Duration(w2), time.Duration(c2), d2, soft2}}
		same := a.Kind == b.Kind && a.Node == b.Node && a.BootID == b.BootID && a.State == b.State && a.Seq == b.Seq && bytes.Equal(a.Nonce, b.Nonce) &&
			(a.Kind != KindArmed || a.Armed == b.Armed)
		if bytes.Equal(a.Bytes(), b.Bytes()) != same {
			t.Fatalf("%+v and %+v: equal encodings %v, equal statements %v", a, b, !same, same)
		}
	})
}

// TestArmedStatement: an armed statement's signature covers the watchdog
// it is about, and the statements of every other kind encode as they did
// before armed statements existed.
func TestArmedStatement(t *testing.T) {
	k, _ := NewKey()
	s := Statement{Kind: KindArmed, Node: "worker-1", BootID: "boot-1", Armed: Armed{Timeout: 10 * time.Second, Confirm: 30 * time.Second, Device: "i6300ESB timer"}}
	sig := k.Sign(s)
	for name, change := range map[string]func(*Statement){
		"timeout":  func(s *Statement) { s.Armed.Timeout = 5 * time.Second },
		"confirm":  func(s *Statement) { s.Armed.Confirm = time.Minute },
		"device":   func(s *Statement) { s.Armed.Device = "Software Watchdog" },
		"software": func(s *Statement) { s.Armed.Software = true },
		"kind":     func(s *Statement) { s.Kind = KindState },
	} {
		c := s
		change(&c)
		if k.Public().Verify(c, sig) {
			t.Errorf("an armed statement's signature verifies with another %s", name)
		}
	}
	// A state statement's bytes, pinned: as every fenced before armed
	// statements signed them.
	st := Statement{Kind: KindState, Node: "n", BootID: "b", State: "running", Seq: 1, Armed: Armed{Timeout: time.Second}}
	want := "00000016" + hex.EncodeToString([]byte("fenced.io/statement/v1")) + "01" + "00000001" + "6e" + "00000001" + "62" +
		"00000007" + hex.EncodeToString([]byte("running")) + "0000000000000001" + "00000000"
	if got := hex.EncodeToString(st.Bytes()); got != want {
		t.Errorf("state statement bytes\n%s\nwant\n%s", got, want)
	}
}

// FuzzParsePublicKey: a published key that parses is exactly 32 bytes and
// prints back to its input.
func FuzzParsePublicKey(f *testing.F) {
	k, _ := NewKey()
	f.Add(k.Public().String())
	f.Add("ed25519:" + strings.Repeat("A", 44))
	f.Fuzz(func(t *testing.T, s string) {
		pub, err := ParsePublicKey(s)
		if err != nil {
			return
		}
		if len(pub) != 32 || pub.String() != s {
			t.Fatalf("ParsePublicKey(%q) = %d bytes printing %q", s, len(pub), pub.String())
		}
	})
}
