package heartbeat

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

// Every byte these decoders see may come from any holder of the gossip
// key. Seeds are in testdata/fuzz; `make fuzz` runs them longer.

// FuzzDecodeMeta: member metadata never panics the decoder, and what it
// accepts encodes and decodes to the same Meta.
func FuzzDecodeMeta(f *testing.F) {
	f.Add([]byte(`{"v":1,"node":"worker-1","boot":"6f1c2a9e-3d4b-4c5d-8e7f-0a1b2c3d4e5f","role":"observer","state":"running","agent":"v0.3.1","seq":1,"sig":"AAAA"}`))
	f.Add([]byte(`{"v":2,"node":"x","future":[1,2,3]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			return
		}
		enc, err := m.Encode()
		if err != nil {
			return // valid JSON larger than memberlist's limit once re-encoded
		}
		again, err := DecodeMeta(enc)
		if err != nil || again != m {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", b, again, err, m)
		}
		_ = m.Signature()
		_ = m.Statement().Bytes()
	})
}

// FuzzNotifyMsg: any user message — leave notice, challenge, proof or
// garbage — is handled without panicking, and changes nothing about a
// member this agent has never seen.
func FuzzNotifyMsg(f *testing.F) {
	f.Add(EncodeLeaveNotice(LeaveNotice{Node: "x", BootID: "boot-1", Seq: 3, Sig: "c2ln"}))
	f.Add(encodeMessage(msgChallenge, challenge{From: "x", ReplyTo: "127.0.0.1:7946", Nonce: make([]byte, nonceSize)}))
	f.Add(encodeMessage(msgProof, Proof{Node: "x", BootID: "b", State: "running", Seq: 1, Nonce: make([]byte, nonceSize), Sig: []byte{1}}))
	f.Add([]byte{msgLeaveNotice})
	f.Add([]byte{9, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := newRing("self", discardLogger(), nil)
		(*delegate)(r).NotifyMsg(b)
		if len(r.Members()) != 0 || len(r.leaving) != 0 {
			t.Fatalf("message %q changed the view of unknown members", b)
		}
	})
}

// FuzzNotifyAlive: any member state a peer sends (name, address,
// metadata) is handled without panicking; one over a bound is refused and
// counted, and nothing oversized is remembered.
func FuzzNotifyAlive(f *testing.F) {
	f.Add("worker-1", []byte{127, 0, 0, 1}, []byte(`{"v":1,"node":"worker-1","boot":"b"}`))
	f.Add("self", []byte{127, 0, 0, 1}, []byte(`{"v":1,"node":"self"}`))
	f.Add("worker-1", make([]byte, 17), []byte(`{"v":1}`))
	f.Add("worker-1", []byte{127, 0, 0, 1}, []byte(`{"v":1,"node":"worker-1","sig":"`+strings.Repeat("A", MaxMetaSize)+`"}`))
	f.Fuzz(func(t *testing.T, name string, addr, meta []byte) {
		r := newRing("self", discardLogger(), func(n string) bool { return n != "not-a-node" })
		err := (*delegate)(r).NotifyAlive(&memberlist.Node{Name: name, Addr: addr, Meta: meta})
		oversized := oversizedPeer(name, addr, meta) != ""
		if oversized && (err == nil || r.OversizedRefused() != 1) {
			t.Fatalf("oversized state (name %d, addr %d, meta %d bytes) not refused and counted: %v", len(name), len(addr), len(meta), err)
		}
		for n := range r.rejected {
			if len(n) > maxNameLen {
				t.Fatalf("remembered a name of %d bytes", len(n))
			}
		}
	})
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
