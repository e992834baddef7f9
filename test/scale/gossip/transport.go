package gossip

import (
	"io"
	"log"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Traffic counts what every member of a Cluster sends, and sets the
// fraction of packets lost: one instance is shared by all the members'
// transports.
type Traffic struct {
	packets     atomic.Int64 // UDP packets handed to the network
	packetBytes atomic.Int64
	dropped     atomic.Int64 // UDP packets lost on purpose
	streamBytes atomic.Int64 // TCP bytes, both directions, counted at the dialler
	lossPPM     atomic.Int64 // packets lost per million sent
}

// TrafficCount is a snapshot of a Traffic's counters.
type TrafficCount struct {
	Packets, PacketBytes, Dropped, StreamBytes int64
}

// Count returns the counters now.
func (t *Traffic) Count() TrafficCount {
	return TrafficCount{Packets: t.packets.Load(), PacketBytes: t.packetBytes.Load(), Dropped: t.dropped.Load(), StreamBytes: t.streamBytes.Load()}
}

// Sub returns the traffic between an earlier snapshot and c.
func (c TrafficCount) Sub(earlier TrafficCount) TrafficCount {
	return TrafficCount{Packets: c.Packets - earlier.Packets, PacketBytes: c.PacketBytes - earlier.PacketBytes,
		Dropped: c.Dropped - earlier.Dropped, StreamBytes: c.StreamBytes - earlier.StreamBytes}
}

// SetLoss makes every transport drop the fraction loss (0 to 1) of the
// UDP packets it sends. A member's packets are lost on the way out, so
// a probe and its ack each meet the loss once, as on a lossy link.
func (t *Traffic) SetLoss(loss float64) { t.lossPPM.Store(int64(loss * 1e6)) }

// lossyTransport is memberlist's own NetTransport (real UDP and TCP
// sockets on 127.0.0.1) with a counter and a loss knob on the way out.
// Streams (TCP) are counted but never lost: TCP retransmits, which
// netem's loss on a real link would only slow down.
type lossyTransport struct {
	*memberlist.NetTransport
	traffic *Traffic
}

var _ memberlist.NodeAwareTransport = (*lossyTransport)(nil)

// newTransport listens on a free port of 127.0.0.1 (UDP and TCP).
func newTransport(traffic *Traffic) (*lossyTransport, int, error) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"},
		BindPort:  0, // the transport picks one free for both TCP and UDP
		Logger:    log.New(io.Discard, "", 0),
	})
	if err != nil {
		return nil, 0, err
	}
	return &lossyTransport{NetTransport: nt, traffic: traffic}, nt.GetAutoBindPort(), nil
}

// lost decides whether the next packet is dropped, and counts it.
func (t *lossyTransport) lost(n int) bool {
	if ppm := t.traffic.lossPPM.Load(); ppm > 0 && rand.Int64N(1e6) < ppm {
		t.traffic.dropped.Add(1)
		return true
	}
	t.traffic.packets.Add(1)
	t.traffic.packetBytes.Add(int64(n))
	return false
}

func (t *lossyTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.lost(len(b)) {
		return time.Now(), nil
	}
	return t.NetTransport.WriteTo(b, addr)
}

func (t *lossyTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	if t.lost(len(b)) {
		return time.Now(), nil
	}
	return t.NetTransport.WriteToAddress(b, addr)
}

func (t *lossyTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *lossyTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := t.NetTransport.DialAddressTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, n: &t.traffic.streamBytes}, nil
}

// countingConn counts the bytes of a stream both ways: the dialler's end
// sees the whole exchange, so each byte is counted once.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}
