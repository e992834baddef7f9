package hostile

import (
	"bytes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/poll"
)

// TestWireMatchesMemberlist records what real members send (tap
// transports) while they join, gossip, exchange user messages, leave and
// fail, then takes every packet and stream apart with this package's own
// framing (label header, AES-GCM with the label as additional data, CRC,
// compression, compound) and checks that this package encodes each
// message it can forge to exactly the bytes memberlist wrote.
func TestWireMatchesMemberlist(t *testing.T) {
	o := secure
	o.tap = true
	ring := startRing(t, o, "a", "b", "c", "d")
	a, b, c, d := ring[0], ring[1], ring[2], ring[3]

	bNode := b.ml.LocalNode()
	if err := a.ml.SendReliable(bNode, []byte("reliable payload")); err != nil {
		t.Fatal(err)
	}
	if err := a.ml.SendBestEffort(bNode, []byte("best-effort payload")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "b gets both user messages", func() bool {
		return b.rec.gotMsg([]byte("reliable payload")) && b.rec.gotMsg([]byte("best-effort payload"))
	})
	if err := c.ml.Leave(5 * time.Second); err != nil { // dead message from c about c
		t.Fatal(err)
	}
	if err := d.ml.Shutdown(); err != nil { // suspect, then dead, from the others
		t.Fatal(err)
	}
	waitEvent(t, a, 0, "leave", "c")
	waitEvent(t, a, 0, "leave", "d")

	gcm, err := newGCM(ringKey)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "a member gossips the dead message about d", func() bool { return deadSent(gcm, ring, "d") })
	f := forger(t, ringKey, ringLabel)
	seen := map[string]int{}
	for _, m := range ring {
		packets, streams := m.tap.sent()
		for i, p := range packets {
			msgs, err := parsePacket(gcm, ringLabel, p)
			if err != nil {
				t.Fatalf("%s's packet %d: %v", m.name, i, err)
			}
			for _, msg := range msgs {
				if kind, ok := checkMsg(t, msg); ok {
					seen["udp "+kind]++
				}
			}
		}
		for i, s := range streams {
			kind, err := checkStream(t, f, gcm, ringLabel, s)
			if err != nil {
				t.Fatalf("%s's stream %d: %v", m.name, i, err)
			}
			seen["tcp "+kind]++
		}
	}
	t.Logf("messages compared: %v", seen)
	for _, kind := range []string{"udp alive", "udp suspect", "udp dead", "udp leave", "udp user", "tcp user", "tcp push/pull"} {
		if seen[kind] == 0 {
			t.Errorf("no %s message seen", kind)
		}
	}
}

// deadSent reports whether a member of ring sent, over UDP, a dead
// message about name from another member.
func deadSent(gcm cipher.AEAD, ring []*member, name string) bool {
	for _, m := range ring {
		packets, _ := m.tap.sent()
		for _, p := range packets {
			msgs, err := parsePacket(gcm, ringLabel, p)
			if err != nil {
				continue // the full comparison reports it
			}
			for _, msg := range msgs {
				if msg[0] != typeDead {
					continue
				}
				d := dec{b: msg[1:]}
				if o, err := d.object(); err == nil && o.str("Node") == name && o.str("From") != name {
					return true
				}
			}
		}
	}
	return false
}

// parsePacket takes a member's packet apart into its messages.
func parsePacket(gcm cipher.AEAD, label string, p []byte) ([]Msg, error) {
	hdr := labelHeader(label)
	if !bytes.HasPrefix(p, hdr) {
		return nil, fmt.Errorf("no label header %x: %x", hdr, p[:min(len(p), 16)])
	}
	b, err := open(gcm, p[len(hdr):], []byte(label))
	if err != nil {
		return nil, err
	}
	if len(b) > 5 && b[0] == typeCRC {
		if !bytes.Equal(b, withCRC(b[5:])) {
			return nil, fmt.Errorf("CRC header %x differs from ours", b[:5])
		}
		if crc32.ChecksumIEEE(b[5:]) != binary.BigEndian.Uint32(b[1:5]) {
			return nil, fmt.Errorf("bad CRC")
		}
		b = b[5:]
	}
	return split(b)
}

// split undoes compression and compound messages.
func split(b []byte) ([]Msg, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("empty message")
	}
	switch b[0] {
	case typeCompress:
		d, err := decompress(b[1:])
		if err != nil {
			return nil, err
		}
		if c, err := compress(d); err != nil || !bytes.Equal(c, b) {
			return nil, fmt.Errorf("compressed message differs from ours (%v)", err)
		}
		return split(d)
	case typeCompound:
		if len(b) < 2 || len(b) < 2+2*int(b[1]) {
			return nil, fmt.Errorf("short compound")
		}
		n := int(b[1])
		rest := b[2+2*n:]
		var parts []Msg
		for i := range n {
			l := int(binary.BigEndian.Uint16(b[2+2*i:]))
			if len(rest) < l {
				return nil, fmt.Errorf("truncated compound")
			}
			parts = append(parts, Msg(rest[:l]))
			rest = rest[l:]
		}
		if c, err := compound(parts); err != nil || !bytes.Equal(c, b) {
			return nil, fmt.Errorf("compound differs from ours (%v)", err)
		}
		var out []Msg
		for _, p := range parts {
			ms, err := split(p)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
		return out, nil
	}
	return []Msg{b}, nil
}

// checkMsg re-encodes a gossip message a member sent and compares; it
// reports the kind, or false for messages this package does not forge
// (probes and acks).
func checkMsg(t *testing.T, msg Msg) (string, bool) {
	t.Helper()
	var (
		kind string
		ours Msg
	)
	switch msg[0] {
	case typeAlive, typeSuspect, typeDead:
		d := dec{b: msg[1:]}
		m, err := d.object()
		if err != nil {
			t.Fatalf("decode %x: %v", msg, err)
		}
		inc := uint32(m.uint("Incarnation"))
		switch msg[0] {
		case typeAlive:
			kind = "alive"
			ours = AliveMsg(Alive{Name: m.str("Node"), Incarnation: inc, Addr: m.bytes("Addr"), Port: uint16(m.uint("Port")), Meta: m.bytes("Meta"), Vsn: m.bytes("Vsn")})
			if !bytes.Equal(m.bytes("Vsn"), defaultVsn) {
				t.Errorf("member sent versions %v; defaultVsn is %v", m.bytes("Vsn"), defaultVsn)
			}
		case typeSuspect:
			kind = "suspect"
			ours = SuspectMsg(m.str("Node"), inc, m.str("From"))
		default:
			kind = "dead"
			if m.str("Node") == m.str("From") {
				kind = "leave"
			}
			ours = DeadMsg(m.str("Node"), inc, m.str("From"))
		}
	case typeUser:
		kind, ours = "user", UserMsg(msg[1:])
	default:
		return "", false
	}
	if !bytes.Equal(ours, msg) {
		t.Errorf("%s message:\nmemberlist %x\nours       %x", kind, []byte(msg), []byte(ours))
	}
	return kind, true
}

// checkStream takes apart what a member wrote on a stream it opened,
// re-encodes the message and its framing, and compares.
func checkStream(t *testing.T, f *Forger, gcm cipher.AEAD, label string, s []byte) (string, error) {
	t.Helper()
	hdr := labelHeader(label)
	if !bytes.HasPrefix(s, hdr) {
		return "", fmt.Errorf("no label header: %x", s[:min(len(s), 16)])
	}
	s = s[len(hdr):]
	if len(s) < 5 || s[0] != typeEncrypt {
		return "", fmt.Errorf("no encrypt frame: %x", s[:min(len(s), 16)])
	}
	n := binary.BigEndian.Uint32(s[1:5])
	if int(n) != len(s)-5 {
		return "", fmt.Errorf("frame of %d bytes carries %d", n, len(s)-5)
	}
	plain, err := open(gcm, s[5:], append(bytes.Clone(s[:5]), label...))
	if err != nil {
		return "", err
	}
	compressed := plain[0] == typeCompress
	if compressed {
		d, err := decompress(plain[1:])
		if err != nil {
			return "", err
		}
		if c, _ := compress(d); !bytes.Equal(c, plain) {
			return "", fmt.Errorf("compressed stream differs from ours")
		}
		plain = d
	}
	ourFrame, err := (&Forger{gcm: f.gcm, label: label, Compress: compressed}).stream(plain)
	if err != nil {
		return "", err
	}
	if !bytes.Equal(ourFrame[:len(hdr)+5], append(labelHeader(label), s[:5]...)) || len(ourFrame) != len(hdr)+len(s) {
		return "", fmt.Errorf("our frame %x (%d bytes) differs from memberlist's %x (%d bytes)", ourFrame[:len(hdr)+5], len(ourFrame), s[:5], len(hdr)+len(s))
	}
	var ours []byte
	kind := ""
	switch plain[0] {
	case typePushPull:
		kind = "push/pull"
		p, err := decodePushPull(plain[1:])
		if err != nil {
			return "", err
		}
		ours = pushPullMsg(p)
		if !p.Join || len(p.Nodes) == 0 || len(p.UserState) == 0 {
			t.Errorf("push/pull %+v: want a join with nodes and user state", p)
		}
	case typeUser:
		kind = "user"
		d := dec{b: plain[1:]}
		h, err := d.object()
		if err != nil {
			return "", err
		}
		if int64(len(d.b)) != h.int("UserMsgLen") {
			return "", fmt.Errorf("user message header says %d bytes, %d follow", h.int("UserMsgLen"), len(d.b))
		}
		ours = userStreamMsg(d.b)
	case typePing:
		return "ping", nil
	default:
		return "", fmt.Errorf("unexpected stream message type %d", plain[0])
	}
	if !bytes.Equal(ours, plain) {
		t.Errorf("%s stream message:\nmemberlist %x\nours       %x", kind, plain, ours)
	}
	return kind, nil
}

// typePing is memberlist's ping, which members also send on streams.
const typePing byte = 0
