package heartbeat

import (
	"io"
	"log"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestTransportHandsOnExactCopies: every datagram comes out as its own
// bytes — exactly as long as it was, not sharing memory with the next —
// in order, stamped with when it was read, from where it came, read in
// batches; one too large to be the ring's is dropped; streams are accepted;
// TCP and UDP listen on one port, picked when 0 is asked for; the bound
// address is advertised unless another is given.
func TestTransportHandsOnExactCopies(t *testing.T) {
	tr, err := newTransport("127.0.0.1", 0, testLogger(t, "transport"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tr.port()))
	if ip, port, err := tr.FinalAdvertiseAddr("", 0); err != nil || !ip.Equal(net.IPv4(127, 0, 0, 1)) || port != tr.port() {
		t.Errorf("advertised %s:%d, %v; want the bound 127.0.0.1:%d", ip, port, err, tr.port())
	}
	if ip, port, err := tr.FinalAdvertiseAddr("198.18.0.7", 7946); err != nil || !ip.Equal(net.IPv4(198, 18, 0, 7)) || port != 7946 {
		t.Errorf("advertised %s:%d, %v; want the one given", ip, port, err)
	}
	if _, _, err := tr.FinalAdvertiseAddr("not-an-ip", 7946); err == nil {
		t.Error("advertised a name")
	}

	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// More than a batch, and one datagram larger than any of the ring's
	// among them: dropped, not handed on in part.
	var sent []string
	for i := range readBatch + 8 {
		sent = append(sent, strings.Repeat("x", i%7)+"datagram "+strconv.Itoa(i))
	}
	before := time.Now()
	for i, s := range sent {
		if i == readBatch/2 {
			if _, err := c.Write(make([]byte, maxPacket+1)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	var got []*memberlist.Packet
	for range sent {
		select {
		case p := <-tr.PacketCh():
			got = append(got, p)
		case <-time.After(time.Minute):
			t.Fatal("no packet in a minute")
		}
	}
	for i, p := range got {
		if string(p.Buf) != sent[i] || cap(p.Buf) != len(sent[i]) {
			t.Errorf("packet %d: %q (cap %d), want exactly %q", i, p.Buf, cap(p.Buf), sent[i])
		}
		if p.Timestamp.Before(before) || p.From.String() != c.LocalAddr().String() {
			t.Errorf("packet %d: from %s at %s", i, p.From, p.Timestamp)
		}
	}

	// A sealed beat goes to onBeat, in the reader, and never to memberlist;
	// with no onBeat, nowhere.
	beats := make(chan string, 2)
	onBeat := func(b []byte, _ time.Time) bool { beats <- string(b); return true }
	for _, set := range []bool{false, true} {
		if set {
			tr.onBeat.Store(&onBeat)
		}
		for _, d := range []string{string([]byte{sealedBeatTag}) + "beat", "after the beat"} {
			if _, err := c.Write([]byte(d)); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case p := <-tr.PacketCh():
			if string(p.Buf) != "after the beat" {
				t.Errorf("memberlist was handed %q", p.Buf)
			}
		case <-time.After(time.Minute):
			t.Fatal("no packet in a minute")
		}
	}
	select {
	case b := <-beats:
		if want := string([]byte{sealedBeatTag}) + "beat"; b != want {
			t.Errorf("onBeat got %q, want %q", b, want)
		}
	default:
		t.Error("the sealed beat read after onBeat was set did not reach it")
	}
	if len(beats) != 0 {
		t.Errorf("%d more beats reached onBeat: the one sent before it was set", len(beats))
	}

	s, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case conn := <-tr.StreamCh():
		_ = conn.Close()
	case <-time.After(time.Minute):
		t.Fatal("no stream in a minute")
	}
}

// TestTransportOverIPv6: bound to an IPv6 address the transport reads
// and writes IPv6; bound to the unspecified IPv6 address, IPv4 too (as
// net.ListenUDP does), a peer's address as the peer sees its own. Once
// shut down it writes nothing.
func TestTransportOverIPv6(t *testing.T) {
	for _, tc := range []struct{ bind, peer string }{{"::1", "::1"}, {"::", "127.0.0.1"}} {
		t.Run(tc.bind+" from "+tc.peer, func(t *testing.T) {
			tr, err := newTransport(tc.bind, 0, testLogger(t, "transport"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tr.Shutdown() })
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(tc.peer)})
			if err != nil {
				t.Skipf("no %s here: %v", tc.peer, err)
			}
			defer c.Close()
			to := &net.UDPAddr{IP: net.ParseIP(tc.peer), Port: tr.port()}
			if _, err := c.WriteTo([]byte("hello"), to); err != nil {
				t.Fatal(err)
			}
			var p *memberlist.Packet
			select {
			case p = <-tr.PacketCh():
			case <-time.After(time.Minute):
				t.Fatal("no packet in a minute")
			}
			if string(p.Buf) != "hello" || p.From.String() != c.LocalAddr().String() {
				t.Errorf("got %q from %s, want \"hello\" from %s", p.Buf, p.From, c.LocalAddr())
			}
			if _, err := tr.WriteTo([]byte("back"), p.From.String()); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 16)
			if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			n, _, err := c.ReadFrom(buf)
			if err != nil || string(buf[:n]) != "back" {
				t.Errorf("read %q, %v; want the transport's \"back\"", buf[:n], err)
			}
			if err := tr.Shutdown(); err != nil {
				t.Error(err)
			}
			if _, err := tr.WriteTo([]byte("late"), p.From.String()); err == nil {
				t.Error("a write after Shutdown went out")
			}
		})
	}
}

// BenchmarkPacketReceived is a datagram's way from the socket to
// memberlist, through memberlist's own NetTransport (a fresh 64 KiB buffer
// each) and through the ring's (one buffer, an exact copy handed on; no
// pause after a batch, which would make the figure the pause's).
func BenchmarkPacketReceived(b *testing.B) {
	for _, tc := range []struct {
		name string
		open func() (memberlist.Transport, int, error)
	}{
		{"memberlist.NetTransport", func() (memberlist.Transport, int, error) {
			nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, Logger: log.New(io.Discard, "", 0)})
			if err != nil {
				return nil, 0, err
			}
			return nt, nt.GetAutoBindPort(), nil
		}},
		{"heartbeat.transport", func() (memberlist.Transport, int, error) {
			tr, err := openTransport("127.0.0.1", 0, testLogger(b, "transport"), 0)
			if err != nil {
				return nil, 0, err
			}
			return tr, tr.port(), nil
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tr, port, err := tc.open()
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = tr.Shutdown() }()
			c, err := net.Dial("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			beat := make([]byte, 60) // a beat's size on the wire, encrypted
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(beat); err != nil {
					b.Fatal(err)
				}
				<-tr.PacketCh()
			}
		})
	}
}
