package heartbeat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpSocket is the ring's UDP socket, kept out of Go's network poller. A
// socket in the poller is in its epoll set, and epoll wakes the thread
// waiting in it for every datagram that arrives, even while nobody reads
// the socket — the transport reads every readPause in batches, but a
// fencer of 1000 nodes, five beats a second from each, was still woken
// 5000 times a second to find nothing to run, most of its CPU at rest. A
// blocking socket read by one goroutine (its thread blocked in recvmmsg,
// outside the poller) is woken once per batch. Measured alone with 5000
// datagrams a second on 2 cores: 4.5–5.9 % of a core read through the
// poller, 1.5–1.8 % so.
type udpSocket struct {
	fd    int
	inet6 bool
	// mu orders Close after the writes in flight, so that no write goes
	// to a descriptor number the process has reused; closed refuses the
	// writes and ends the reads after it.
	mu     sync.RWMutex
	closed atomic.Bool
}

// udpReadTimeout bounds a read's wait for the first datagram, so that a
// reader sees Close even if shutting the socket down did not wake it.
const udpReadTimeout = time.Second

// errSocketClosed is a read's or write's error after Close.
var errSocketClosed = errors.New("heartbeat: UDP socket closed")

// listenUDP binds a blocking UDP socket to ip:port (port 0: a free one);
// on the unspecified IPv6 address it takes IPv4 too, as net.ListenUDP.
func listenUDP(ip net.IP, port int) (*udpSocket, error) {
	s := &udpSocket{inet6: ip.To4() == nil}
	family := unix.AF_INET
	if s.inet6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("UDP socket: %w", err)
	}
	s.fd = fd
	fail := func(what string, err error) (*udpSocket, error) {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if s.inet6 && ip.IsUnspecified() {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return fail("UDP socket for IPv4 too", err)
		}
	}
	tv := unix.NsecToTimeval(udpReadTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("UDP read timeout", err)
	}
	sa, err := s.sockaddr(&net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		return fail("UDP address", err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("binding UDP "+net.JoinHostPort(ip.String(), fmt.Sprint(port)), err)
	}
	return s, nil
}

// SetReadBuffer asks the kernel for a receive buffer of size bytes.
func (s *udpSocket) SetReadBuffer(size int) error {
	return unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
}

// WriteTo sends b to to.
func (s *udpSocket) WriteTo(b []byte, to *net.UDPAddr) error {
	sa, err := s.sockaddr(to)
	if err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return errSocketClosed
	}
	for {
		err := unix.Sendto(s.fd, b, 0, sa)
		if err != unix.EINTR {
			return err
		}
	}
}

// sockaddr is a in the socket's family: an IPv4 address on an IPv6
// socket in its mapped form.
func (s *udpSocket) sockaddr(a *net.UDPAddr) (unix.Sockaddr, error) {
	if a.Port < 0 || a.Port > 0xffff {
		return nil, fmt.Errorf("UDP port %d out of range", a.Port)
	}
	if !s.inet6 {
		ip4 := a.IP.To4()
		if ip4 == nil {
			return nil, fmt.Errorf("%s is not an IPv4 address, and the socket is bound to one", a.IP)
		}
		sa := &unix.SockaddrInet4{Port: a.Port}
		copy(sa.Addr[:], ip4)
		return sa, nil
	}
	ip16 := a.IP.To16()
	if ip16 == nil {
		return nil, fmt.Errorf("%q is no IP address", a.IP)
	}
	sa := &unix.SockaddrInet6{Port: a.Port}
	copy(sa.Addr[:], ip16)
	return sa, nil
}

// datagrams are the buffers of one batch read (readBatch) and what it
// read into them: recvmmsg's message headers, kept between reads.
type datagrams struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // room for either family's address
	bufs  [][]byte
}

// mmsghdr is Linux's struct mmsghdr: a message header and the length
// received (Go pads it to the C layout).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

func newDatagrams(n, size int) *datagrams {
	d := &datagrams{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n), names: make([]unix.RawSockaddrInet6, n), bufs: make([][]byte, n)}
	slab := make([]byte, n*size)
	for i := range d.bufs {
		d.bufs[i] = slab[i*size : (i+1)*size]
	}
	return d
}

// datagram i of the last read: its bytes, and whether it was longer
// than its buffer (truncated).
func (d *datagrams) datagram(i int) (b []byte, truncated bool) {
	h := &d.hdrs[i]
	return d.bufs[i][:min(int(h.n), len(d.bufs[i]))], h.hdr.Flags&unix.MSG_TRUNC != 0
}

// from is where datagram i of the last read came from.
func (d *datagrams) from(i int) *net.UDPAddr {
	from := &net.UDPAddr{}
	switch name := &d.names[i]; name.Family {
	case unix.AF_INET:
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
		from.IP, from.Port = net.IP(append([]byte(nil), a.Addr[:]...)), networkPort(&a.Port)
	case unix.AF_INET6:
		from.IP, from.Port = net.IP(append([]byte(nil), name.Addr[:]...)), networkPort(&name.Port)
	}
	return from
}

// networkPort reads a port as a socket address holds it: in network byte
// order.
func networkPort(p *uint16) int {
	return int(binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(p))[:]))
}

// readBatch blocks until a datagram arrives (or udpReadTimeout passes:
// 0 read), then reads those waiting, up to one per buffer of d, and
// returns how many it read.
func (s *udpSocket) readBatch(d *datagrams) (int, error) {
	for i := range d.hdrs {
		d.iovs[i].Base = &d.bufs[i][0]
		d.iovs[i].SetLen(len(d.bufs[i]))
		d.hdrs[i] = mmsghdr{hdr: unix.Msghdr{Name: (*byte)(unsafe.Pointer(&d.names[i])), Namelen: uint32(unsafe.Sizeof(d.names[i])), Iov: &d.iovs[i], Iovlen: 1}}
	}
	for {
		if s.closed.Load() {
			return 0, errSocketClosed
		}
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&d.hdrs[0])), uintptr(len(d.hdrs)), unix.MSG_WAITFORONE, 0, 0)
		switch errno {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, nil
		}
		return 0, errno
	}
}

// Close ends the reads (shutting the socket down wakes a reader blocked
// in it; the read timeout bounds its wait otherwise) and the writes. It
// leaves the descriptor open: the reader must be done before it is
// closed — call Close, wait for the reader, then release.
func (s *udpSocket) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	// ENOTCONN for an unconnected socket, but the reader is woken.
	_ = unix.Shutdown(s.fd, unix.SHUT_RDWR)
	return nil
}

// release closes the descriptor, after Close, after the reader ended and
// once no write is in flight.
func (s *udpSocket) release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}
