package hostile

import (
	"crypto/cipher"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/hashicorp/memberlist"
)

// Forger sends hand-built memberlist messages, encrypted and labelled like
// a genuine member's. It is not a member: it answers no probe and keeps no
// state. Its UDP socket lives in the network namespace New ran in, and it
// dials TCP from the calling thread's. Use it from one goroutine at a
// time.
type Forger struct {
	// Compress wraps each message in a compress message, as a member with
	// memberlist's default EnableCompression does (on UDP only when that
	// makes the packet smaller). Members accept messages either way.
	Compress bool
	// AllowNonLoopback lets the Forger reach addresses other than
	// loopback ones. Set it only to reach hosts inside a network namespace
	// the test created itself.
	AllowNonLoopback bool
	// Timeout bounds each TCP exchange (dial, write and read); zero means
	// 5 s.
	Timeout time.Duration

	gcm   cipher.AEAD // nil: no encryption
	label string
	udp   *net.UDPConn
}

// New returns a Forger that encrypts with key (AES-128/192/256: 16, 24 or
// 32 bytes, memberlist's Config.SecretKey) and labels with label
// (memberlist's Config.Label). A nil or empty key sends plaintext, as a
// ring without a SecretKey does; an empty label sends no label header.
func New(key []byte, label string) (*Forger, error) {
	if len(label) > memberlist.LabelMaxSize {
		return nil, fmt.Errorf("hostile: label is %d bytes, more than %d", len(label), memberlist.LabelMaxSize)
	}
	f := &Forger{label: label}
	if len(key) > 0 {
		gcm, err := newGCM(key)
		if err != nil {
			return nil, fmt.Errorf("hostile: key: %w", err)
		}
		f.gcm = gcm
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{})
	if err != nil {
		return nil, fmt.Errorf("hostile: %w", err)
	}
	f.udp = udp
	return f, nil
}

// Close releases the Forger's UDP socket.
func (f *Forger) Close() error { return f.udp.Close() }

// Alive is a forged alive message: the claim that member Name, at
// Incarnation, lives at Addr:Port with metadata Meta.
type Alive struct {
	Name        string
	Incarnation uint32 // a never-seen name needs at least 1; a known one more than its current
	Addr        net.IP // sent in 4-byte form for IPv4, as members do
	Port        uint16 // 0 makes the receiver substitute its own bind port
	Meta        []byte
	// Vsn is protocol min, max, current, then delegate min, max, current.
	// Nil sends what a default memberlist v0.7.0 sends: 1, 5, 2, 0, 0, 0.
	// A non-nil shorter slice is sent as is (an AliveDelegate then makes
	// the receiver ignore the message).
	Vsn []uint8
}

// Msg is one plaintext memberlist message: its type byte, then its
// MessagePack body. Build one with AliveMsg, SuspectMsg, DeadMsg or
// UserMsg and send several in one packet with Forger.Send.
type Msg []byte

// AliveMsg encodes a as memberlist's alive message.
func AliveMsg(a Alive) Msg {
	addr := a.Addr
	if ip4 := addr.To4(); ip4 != nil {
		addr = ip4
	}
	vsn := a.Vsn
	if vsn == nil {
		vsn = defaultVsn
	}
	e := enc{b: []byte{typeAlive}}
	e.mapLen(6)
	e.str("Addr")
	e.bytes(addr)
	e.str("Incarnation")
	e.uint(uint64(a.Incarnation))
	e.str("Meta")
	e.bytes(a.Meta)
	e.str("Node")
	e.str(a.Name)
	e.str("Port")
	e.uint(uint64(a.Port))
	e.str("Vsn")
	e.bytes(vsn)
	return e.b
}

// SuspectMsg encodes memberlist's suspect message: from claims that name,
// at incarnation, failed a probe.
func SuspectMsg(name string, incarnation uint32, from string) Msg {
	return accusation(typeSuspect, name, incarnation, from)
}

// DeadMsg encodes memberlist's dead message: from declares name, at
// incarnation, dead. With from == name it is a graceful leave: the
// receiver records the member as left rather than dead.
func DeadMsg(name string, incarnation uint32, from string) Msg {
	return accusation(typeDead, name, incarnation, from)
}

func accusation(t byte, name string, incarnation uint32, from string) Msg {
	e := enc{b: []byte{t}}
	e.mapLen(3)
	e.str("From")
	e.str(from)
	e.str("Incarnation")
	e.uint(uint64(incarnation))
	e.str("Node")
	e.str(name)
	return e.b
}

// UserMsg is a user message as sent over UDP (memberlist's SendBestEffort
// and the Delegate's broadcasts): the type byte, then payload as is.
func UserMsg(payload []byte) Msg {
	return append([]byte{typeUser}, payload...)
}

// Send sends msgs to the member at to ("ip:port") in one UDP packet: a
// single message as is, several as one compound message (at most 255).
// The packet carries memberlist's CRC header, as members send to members
// speaking protocol 5, and is encrypted and labelled like the Forger.
func (f *Forger) Send(to string, msgs ...Msg) error {
	addr, err := f.target(to)
	if err != nil {
		return err
	}
	pkt, err := f.packet(msgs)
	if err != nil {
		return fmt.Errorf("hostile: %w", err)
	}
	if _, err := f.udp.WriteToUDPAddrPort(pkt, addr); err != nil {
		return fmt.Errorf("hostile: send to %s: %w", to, err)
	}
	return nil
}

// Datagram sends b to the member at to as one UDP datagram, as is: no
// header, encryption or label of the Forger's (a sealed beat built with
// heartbeat.SealBeat, or bytes of no format at all).
func (f *Forger) Datagram(to string, b []byte) error {
	addr, err := f.target(to)
	if err != nil {
		return err
	}
	if _, err := f.udp.WriteToUDPAddrPort(b, addr); err != nil {
		return fmt.Errorf("hostile: send to %s: %w", to, err)
	}
	return nil
}

// Alive sends a forged alive message to the member at to.
func (f *Forger) Alive(to string, a Alive) error { return f.Send(to, AliveMsg(a)) }

// Suspect sends a forged suspect message to the member at to.
func (f *Forger) Suspect(to, name string, incarnation uint32, from string) error {
	return f.Send(to, SuspectMsg(name, incarnation, from))
}

// Dead sends a forged dead message to the member at to.
func (f *Forger) Dead(to, name string, incarnation uint32, from string) error {
	return f.Send(to, DeadMsg(name, incarnation, from))
}

// UserUDP sends payload as a user message over UDP; the member at to hands
// it to its Delegate's NotifyMsg.
func (f *Forger) UserUDP(to string, payload []byte) error { return f.Send(to, UserMsg(payload)) }

// UserTCP sends payload as a user message over a TCP stream, as
// memberlist's SendReliable does; the member at to hands it to its
// Delegate's NotifyMsg. It returns once the stream is written and closed,
// not when the member has read it.
func (f *Forger) UserTCP(to string, payload []byte) error {
	conn, err := f.dial(to)
	if err != nil {
		return err
	}
	defer conn.Close()
	return f.write(conn, userStreamMsg(payload))
}

// userStreamMsg encodes payload as memberlist's sendUserMsg does: type,
// header with the payload's length, payload.
func userStreamMsg(payload []byte) []byte {
	e := enc{b: []byte{typeUser}}
	e.mapLen(1)
	e.str("UserMsgLen")
	e.int(int64(len(payload)))
	return append(e.b, payload...)
}

// State is one member's state in a push/pull exchange.
type State struct {
	Name        string
	Addr        net.IP
	Port        uint16
	Meta        []byte
	Incarnation uint32
	State       memberlist.NodeStateType
	// Vsn as in Alive; nil sends the default when pushing.
	Vsn []uint8
}

// PushPull is one side of memberlist's push/pull state exchange.
type PushPull struct {
	// Join marks a join (memberlist's Join) rather than the periodic
	// anti-entropy exchange; the receiver's MergeDelegate, if any, sees
	// only joins.
	Join bool
	// Nodes are the member states. A receiver merges an alive state as an
	// alive message, a left one as a leave (dead message from the member
	// itself), and a dead or suspect one as a suspect message from itself.
	Nodes []State
	// UserState goes to the receiver's Delegate.MergeRemoteState; in a
	// reply it is the receiver's Delegate.LocalState.
	UserState []byte
}

// PushPull performs memberlist's push/pull exchange with the member at to
// over TCP: it pushes req and returns the member's own state (its whole
// member table, dead and left members and incarnations included, and its
// Delegate's LocalState). The member writes its reply before it merges
// req and skips the merge if that write fails; a nil error means it got
// all of req and replied.
func (f *Forger) PushPull(to string, req PushPull) (PushPull, error) {
	conn, err := f.dial(to)
	if err != nil {
		return PushPull{}, err
	}
	defer conn.Close()
	if err := f.write(conn, pushPullMsg(req)); err != nil {
		return PushPull{}, err
	}
	t, body, err := f.readReply(conn)
	if err != nil {
		return PushPull{}, fmt.Errorf("hostile: push/pull reply from %s: %w", to, err)
	}
	switch t {
	case typePushPull:
	case typeErr:
		d := dec{b: body}
		m, err := d.object()
		if err != nil {
			return PushPull{}, fmt.Errorf("hostile: push/pull error reply from %s: %w", to, err)
		}
		return PushPull{}, fmt.Errorf("hostile: %s refused the push/pull: %s", to, m.str("Error"))
	default:
		return PushPull{}, fmt.Errorf("hostile: push/pull reply from %s has message type %d", to, t)
	}
	rep, err := decodePushPull(body)
	if err != nil {
		return PushPull{}, fmt.Errorf("hostile: push/pull reply from %s: %w", to, err)
	}
	return rep, nil
}

// pushPullMsg encodes p as memberlist's sendLocalState does: the header,
// each state, then the user state as is.
func pushPullMsg(req PushPull) []byte {
	e := enc{b: []byte{typePushPull}}
	e.mapLen(3)
	e.str("Join")
	e.bool(req.Join)
	e.str("Nodes")
	e.int(int64(len(req.Nodes)))
	e.str("UserStateLen")
	e.int(int64(len(req.UserState)))
	for _, s := range req.Nodes {
		addr := s.Addr
		if ip4 := addr.To4(); ip4 != nil {
			addr = ip4
		}
		vsn := s.Vsn
		if vsn == nil {
			vsn = defaultVsn
		}
		e.mapLen(7)
		e.str("Addr")
		e.bytes(addr)
		e.str("Incarnation")
		e.uint(uint64(s.Incarnation))
		e.str("Meta")
		e.bytes(s.Meta)
		e.str("Name")
		e.str(s.Name)
		e.str("Port")
		e.uint(uint64(s.Port))
		e.str("State")
		e.int(int64(s.State))
		e.str("Vsn")
		e.bytes(vsn)
	}
	return append(e.b, req.UserState...)
}

// decodePushPull reads a push/pull message's body (after its type byte).
func decodePushPull(body []byte) (PushPull, error) {
	d := dec{b: body}
	h, err := d.object()
	if err != nil {
		return PushPull{}, err
	}
	n, ulen := h.int("Nodes"), h.int("UserStateLen")
	if n < 0 || n > int64(len(body)) || ulen < 0 {
		return PushPull{}, fmt.Errorf("bad header: %d nodes, %d bytes of user state", n, ulen)
	}
	p := PushPull{Join: h.bool("Join")}
	for range n {
		s, err := d.object()
		if err != nil {
			return PushPull{}, err
		}
		p.Nodes = append(p.Nodes, State{
			Name:        s.str("Name"),
			Addr:        net.IP(s.bytes("Addr")),
			Port:        uint16(s.uint("Port")),
			Meta:        s.bytes("Meta"),
			Incarnation: uint32(s.uint("Incarnation")),
			State:       memberlist.NodeStateType(s.int("State")),
			Vsn:         s.bytes("Vsn"),
		})
	}
	if int64(len(d.b)) < ulen {
		return PushPull{}, fmt.Errorf("user state truncated: %d of %d bytes", len(d.b), ulen)
	}
	if ulen > 0 {
		p.UserState = d.b[:ulen]
	}
	return p, nil
}

// target parses to and enforces the loopback rule.
func (f *Forger) target(to string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(to)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("hostile: target %q is not ip:port: %w", to, err)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if !ap.Addr().IsLoopback() && !f.AllowNonLoopback {
		return netip.AddrPort{}, fmt.Errorf("hostile: refusing non-loopback target %s (see AllowNonLoopback)", to)
	}
	return ap, nil
}

func (f *Forger) timeout() time.Duration {
	if f.Timeout > 0 {
		return f.Timeout
	}
	return 5 * time.Second
}

func (f *Forger) dial(to string) (net.Conn, error) {
	ap, err := f.target(to)
	if err != nil {
		return nil, err
	}
	conn, err := net.DialTimeout("tcp", ap.String(), f.timeout())
	if err != nil {
		return nil, fmt.Errorf("hostile: %w", err)
	}
	if err := conn.SetDeadline(time.Now().Add(f.timeout())); err != nil {
		conn.Close()
		return nil, fmt.Errorf("hostile: %w", err)
	}
	return conn, nil
}

// write sends msg on conn framed by stream.
func (f *Forger) write(conn net.Conn, msg []byte) error {
	b, err := f.stream(msg)
	if err != nil {
		return fmt.Errorf("hostile: %w", err)
	}
	if _, err := conn.Write(b); err != nil {
		return fmt.Errorf("hostile: write to %s: %w", conn.RemoteAddr(), err)
	}
	return nil
}
