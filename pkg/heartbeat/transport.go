package heartbeat

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// transport carries the ring's packets and streams over UDP and TCP on one
// port, as memberlist's NetTransport does, but for how it reads datagrams:
// NetTransport reads each into a fresh 64 KiB buffer and hands it on, so a
// fencer of a 1000-node cluster — five beats a second from every node,
// some sixty bytes each — allocated 320 MB a second and spent more than
// half of its CPU in the garbage collector. This one reads them in batches
// into buffers it keeps and hands memberlist an exact copy of each
// (BenchmarkPacketReceived: 65 702 bytes and 25 µs a packet before, 180
// bytes and 8 µs now), and reads the socket at most every readPause while
// datagrams keep coming (readPackets). Everything else is what
// NetTransport does.
type transport struct {
	tcp *net.TCPListener
	udp *udpSocket
	log *slog.Logger

	// pause is readPackets' pause after a batch that emptied the socket.
	pause    time.Duration
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	wg       sync.WaitGroup
	shutdown atomic.Bool
	// oversize limits the warnings about datagrams too large (dropped).
	oversize *WarnLimiter
	// onBeat, when set, takes the sealed beats (sealedbeat.go) in the
	// reader goroutine, b valid only during the call, and says whether it
	// opened one; memberlist never sees them. Unset, they are dropped.
	// refusals limits the warnings about those dropped or not opened.
	onBeat   atomic.Pointer[func(b []byte, at time.Time) bool]
	refusals *WarnLimiter
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

// minReadBuffer is the smallest socket receive buffer asked of the
// kernel: room for one datagram of the largest size UDP has.
const minReadBuffer = 64 << 10

// readBatch is how many datagrams one read takes at most, readPause the
// pause after a read that emptied the socket (readPackets).
const (
	readBatch = 128
	readPause = 20 * time.Millisecond
)

// maxPacket is the largest datagram read: five times what memberlist
// sends (its UDPBufferSize, 1400 bytes, plus the label and the
// encryption's 29 bytes). A larger one is no packet of the ring's and is
// dropped, and said (dropped), rather than read in part.
const maxPacket = 8 << 10

// oversizeWarningsPerMinute bounds the warnings about dropped datagrams.
const oversizeWarningsPerMinute = 5

// udpReadBuffer is the socket receive buffer asked for (NetTransport's 2
// MiB): bursts of gossip and beats wait there while the reader runs.
const udpReadBuffer = 2 << 20

// newTransport listens on addr:port, TCP and UDP; port 0 picks a free
// port for both.
func newTransport(addr string, port int, log *slog.Logger) (*transport, error) {
	return openTransport(addr, port, log, readPause)
}

// openTransport is newTransport with the reader's pause after a batch
// that emptied the socket (benchmarks of a datagram's own cost set 0).
func openTransport(addr string, port int, log *slog.Logger, pause time.Duration) (*transport, error) {
	ip := net.ParseIP(addr)
	if ip == nil {
		return nil, fmt.Errorf("bind address %q is not an IP address", addr)
	}
	tries := 1
	if port == 0 {
		// Another process may take the UDP port between the two binds.
		tries = 10
	}
	var err error
	for range tries {
		var t *transport
		if t, err = listen(ip, port, log, pause); err == nil {
			return t, nil
		}
	}
	return nil, err
}

func listen(ip net.IP, port int, log *slog.Logger, pause time.Duration) (*transport, error) {
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("listening on TCP %s: %w", net.JoinHostPort(ip.String(), fmt.Sprint(port)), err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := listenUDP(ip, port)
	if err != nil {
		_ = tcp.Close()
		return nil, fmt.Errorf("listening on UDP %s: %w", net.JoinHostPort(ip.String(), fmt.Sprint(port)), err)
	}
	// As large a receive buffer as the kernel grants, down to 64 KiB.
	for size := udpReadBuffer; size >= minReadBuffer; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	t := &transport{tcp: tcp, udp: udp, log: log, pause: pause, packetCh: make(chan *memberlist.Packet, readBatch), oversize: NewWarnLimiter(oversizeWarningsPerMinute), refusals: NewWarnLimiter(oversizeWarningsPerMinute), streamCh: make(chan net.Conn)}
	t.wg.Add(2)
	go t.readPackets()
	go t.acceptStreams()
	return t, nil
}

// port is the port the transport listens on.
func (t *transport) port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr is ip:port when given; else the bound address and
// port, or a private address of the host when bound to all of them.
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		a := net.ParseIP(ip)
		if a == nil {
			return nil, 0, fmt.Errorf("advertise address %q is not an IP address", ip)
		}
		if a4 := a.To4(); a4 != nil {
			a = a4
		}
		return a, port, nil
	}
	bound := t.tcp.Addr().(*net.TCPAddr).IP
	if !bound.IsUnspecified() {
		return bound, t.port(), nil
	}
	private, err := sockaddr.GetPrivateIP()
	switch {
	case err != nil:
		return nil, 0, fmt.Errorf("finding a private address to advertise: %w", err)
	case private == "":
		return nil, 0, errors.New("no private address to advertise, and none given")
	}
	return net.ParseIP(private), t.port(), nil
}

// WriteTo sends the datagram b to addr ("ip:port").
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return time.Time{}, err
	}
	// The time is taken as close to the write as can be, for the
	// probes' round trips.
	err = t.udp.WriteTo(b, to)
	return time.Now(), err
}

// WriteToAddress sends b to a's address.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// PacketCh delivers the datagrams received.
func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout opens a stream to addr.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, timeout)
}

// DialAddressTimeout opens a stream to a's address.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// StreamCh delivers the streams accepted.
func (t *transport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown closes the listeners and waits for the readers to end.
func (t *transport) Shutdown() error {
	t.shutdown.Store(true)
	err := errors.Join(t.tcp.Close(), t.udp.Close())
	t.wg.Wait()
	return errors.Join(err, t.udp.release())
}

// readPackets reads the datagrams in batches (recvmmsg: up to readBatch
// in one call, from a socket outside Go's poller: udpSocket) and hands
// each on as a copy of its bytes, stamped with when it was read; a sealed
// beat goes to onBeat instead. A batch that emptied the socket is
// followed by a pause of readPause: what arrives meanwhile waits in the
// socket's buffer, waking nothing, and is read in the next batch. A fencer
// of 1000 nodes receives 5000 beats a second; read one by one, each woke
// this reader and memberlist's two goroutines behind it, and every wake-up
// costs the Go scheduler's search for work (BenchmarkFencerCPUAtBeatRate:
// 9.9 % of a core with a 5 ms pause and batches of 32, 7.5 % with 20 ms
// and 128, medians of five). A datagram waits readPause at most, against
// the beats' 200 ms and the probes' 500 ms; 100 beats — 20 ms of them at
// 1000 nodes — fit the smallest receive buffer Linux grants by default
// (208 KiB) many times.
func (t *transport) readPackets() {
	defer t.wg.Done()
	batch := newDatagrams(readBatch, maxPacket)
	for {
		n, err := t.udp.readBatch(batch)
		at := time.Now()
		switch {
		case t.shutdown.Load():
			return
		case err != nil:
			t.log.Warn("gossip: reading UDP packets failed", "err", err)
			time.Sleep(readPause) // not a busy loop on a lasting error
			continue
		}
		for i := range n {
			b, truncated := batch.datagram(i)
			switch {
			case truncated:
				t.dropped(batch.from(i))
				continue
			case len(b) < 1:
				continue // a message has at least its type
			case b[0] == sealedBeatTag:
				switch beat := t.onBeat.Load(); {
				case beat == nil:
					t.refused(batch.from(i), len(b), "this agent is no fencer")
				case !(*beat)(b, at):
					t.refused(batch.from(i), len(b), "no gossip key of this ring opens it")
				}
				continue
			}
			buf := make([]byte, len(b))
			copy(buf, b)
			t.packetCh <- &memberlist.Packet{Buf: buf, From: batch.from(i), Timestamp: at}
		}
		if n > 0 && n < readBatch && t.pause > 0 {
			time.Sleep(t.pause)
		}
	}
}

// dropped says that a datagram too large to be the ring's was dropped; a
// warning a minute at most, a hostile peer choosing how many it sends.
func (t *transport) dropped(from net.Addr) {
	t.oversize.Warn(t.log, "gossip: dropped a UDP datagram larger than any of the ring's", "from", from, "largerThan", maxPacket)
}

// refused says that a sealed beat was dropped, and why: this ring reads
// none, or none of its keys opens it. A few warnings a minute at most, a
// hostile peer choosing how many it sends.
func (t *transport) refused(from net.Addr, size int, why string) {
	t.refusals.Warn(t.log, "gossip: dropped a sealed beat", "from", from, "len", size, "reason", why)
}

// acceptStreams hands on the TCP connections accepted; failures to accept
// back off from 5 ms to a second, as NetTransport's do.
func (t *transport) acceptStreams() {
	defer t.wg.Done()
	const base, most = 5 * time.Millisecond, time.Second
	wait := time.Duration(0)
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			wait = min(max(2*wait, base), most)
			t.log.Warn("gossip: accepting a TCP connection failed", "err", err, "retryIn", wait)
			time.Sleep(wait)
			continue
		}
		wait = 0
		t.streamCh <- conn
	}
}
