// Package logind is a stand-in for systemd-logind on a private D-Bus system
// bus, for tests.
//
// Start runs a real dbus-daemon (Debian's dbus-daemon package) configured as
// a system bus on a unix socket in a directory of the caller's, owns
// org.freedesktop.login1 on it and serves the part of logind's Manager API
// that the kubelet's graceful node shutdown manager and go-systemd's login1
// package use: Inhibit, ListInhibitors, PowerOff, Reboot, the
// PrepareForShutdown signal and the InhibitDelayMaxUSec and
// PreparingForShutdown properties. Point a client at it with
// DBUS_SYSTEM_BUS_ADDRESS=<Address()>.
//
// Shutdown follows logind's delay inhibitor protocol: PowerOff emits
// PrepareForShutdown(true), waits until every shutdown delay lock is
// released or InhibitDelayMax has passed, and then calls OnPowerOff, where a
// test machine switches itself off.
//
// Only delay locks are modelled: block locks are accepted and listed, but
// they do not stop PowerOff, as logind lets a caller with CAP_SYS_BOOT (root)
// override them. Nor is polkit: every caller may do everything.
package logind

import (
	"bufio"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"github.com/godbus/dbus/v5/prop"
	"golang.org/x/sys/unix"
)

// Names of the logind API on the bus.
const (
	// BusName is the well-known name logind owns.
	BusName = "org.freedesktop.login1"
	// ObjectPath is the path of logind's manager object.
	ObjectPath dbus.ObjectPath = "/org/freedesktop/login1"
	// Interface is the manager interface.
	Interface = "org.freedesktop.login1.Manager"
)

const (
	// DefaultInhibitDelayMax is systemd's default InhibitDelayMaxSec (5 s)
	// raised to what a node with graceful shutdown is configured for; the
	// kubelet needs it at least as long as its shutdown grace period.
	DefaultInhibitDelayMax = 30 * time.Second

	// SocketName is the bus socket's name in Options.Dir.
	SocketName = "system_bus_socket"

	// maxSocketPath is the room for a path in sockaddr_un, less the NUL.
	maxSocketPath = 107

	// Errors logind returns, named as systemd names them.
	errOperationInProgress = "org.freedesktop.login1.OperationInProgress"
	errInvalidArgs         = "org.freedesktop.DBus.Error.InvalidArgs"
)

// ErrNoDBusDaemon is returned by Start when dbus-daemon is not installed.
var ErrNoDBusDaemon = errors.New("dbus-daemon not found: install Debian's dbus-daemon package (hack/install-deps.sh does)")

// Options configure Start.
type Options struct {
	// Dir holds the bus configuration, the bus socket and dbus-daemon's
	// log; Start creates it. Keep it short: the socket's path must fit in
	// 107 bytes.
	Dir string
	// InhibitDelayMax is how long PowerOff waits for delay locks
	// (logind.conf's InhibitDelayMaxSec; default DefaultInhibitDelayMax).
	InhibitDelayMax time.Duration
	// OnPowerOff is called once, when a PowerOff or Reboot has waited for
	// the delay locks. It is not called after Stop.
	OnPowerOff func()
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Inhibitor is one inhibitor lock as ListInhibitors returns it: the D-Bus
// struct (ssssuu).
type Inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// String names the lock in logs: who, pid and why.
func (i Inhibitor) String() string {
	return fmt.Sprintf("%s (pid %d, %s %s: %q)", i.Who, i.PID, i.Mode, i.What, i.Why)
}

// Logind is a running stand-in for systemd-logind.
type Logind struct {
	opts    Options
	log     *slog.Logger
	address string
	daemon  *exec.Cmd
	conn    *dbus.Conn
	props   *prop.Properties

	stopOnce sync.Once
	stopped  chan struct{}
	offOnce  sync.Once

	// owed holds the Inhibit calls (by sender and serial) whose reply
	// inhibit sends itself; see takeInhibitReply.
	owed sync.Map

	mu           sync.Mutex
	nextID       int
	locks        map[int]*lock
	shuttingDown bool
	changed      chan struct{} // closed and replaced whenever a lock goes
}

// lock is one inhibitor lock: the caller holds the write end of a pipe,
// and the lock lasts until every copy of that write end is closed; our own
// copy is closed as soon as the reply that hands it out has been sent.
type lock struct {
	Inhibitor
	taken time.Time
	read  *os.File
}

// Address returns the bus address for a directory: what
// DBUS_SYSTEM_BUS_ADDRESS must be set to for the stand-in started with
// Options.Dir = dir.
func Address(dir string) string { return "unix:path=" + filepath.Join(dir, SocketName) }

// Start starts dbus-daemon and serves logind on it until Stop, or until ctx
// is done. It returns ErrNoDBusDaemon when dbus-daemon is not installed.
func Start(ctx context.Context, o Options) (*Logind, error) {
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		return nil, ErrNoDBusDaemon
	}
	if o.InhibitDelayMax <= 0 {
		o.InhibitDelayMax = DefaultInhibitDelayMax
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OnPowerOff == nil {
		o.OnPowerOff = func() {}
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	socket := filepath.Join(dir, SocketName)
	if len(socket) > maxSocketPath {
		return nil, fmt.Errorf("bus socket path %s is longer than %d bytes", socket, maxSocketPath)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A socket left by an earlier run would make dbus-daemon fail.
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	config := filepath.Join(dir, "system.conf")
	if err := os.WriteFile(config, busConfig(socket), 0o644); err != nil {
		return nil, err
	}
	l := &Logind{
		opts:    o,
		log:     o.Logger.With("component", "logind"),
		address: Address(dir),
		stopped: make(chan struct{}),
		locks:   map[int]*lock{},
		changed: make(chan struct{}),
	}
	if err := l.startDaemon(ctx, daemon, config); err != nil {
		return nil, err
	}
	if err := l.serve(ctx); err != nil {
		l.Stop()
		return nil, err
	}
	context.AfterFunc(ctx, l.Stop)
	l.log.Info("logind serving", "address", l.address, "inhibitDelayMax", o.InhibitDelayMax)
	return l, nil
}

// busConfig is a system bus on one unix socket that lets everyone own any
// name, call any method and receive any signal: the bus is private to one
// test machine, and logind's own checks (polkit) are not modelled.
func busConfig(socket string) []byte {
	var path strings.Builder
	_ = xml.EscapeText(&path, []byte(socket))
	return fmt.Appendf(nil, `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_type="method_return"/>
    <allow send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="signal"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
  </policy>
</busconfig>
`, path.String())
}

// startDaemon runs dbus-daemon and waits until it prints its address,
// which it does once it listens.
func (l *Logind) startDaemon(ctx context.Context, daemon, config string) error {
	logFile, err := os.OpenFile(filepath.Join(l.opts.Dir, "dbus-daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(daemon, "--config-file="+config, "--nofork", "--nopidfile", "--nosyslog", "--print-address=1")
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	// The bus dies with its owner, as everything on a test machine does
	// when the machine loses power.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting dbus-daemon: %w", err)
	}
	l.daemon = cmd
	printed := make(chan error, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			printed <- nil
		} else {
			printed <- fmt.Errorf("dbus-daemon exited without printing its address (see %s)", logFile.Name())
		}
		// Keep draining so that dbus-daemon never blocks on stdout.
		for s.Scan() {
		}
	}()
	select {
	case err = <-printed:
	case <-time.After(30 * time.Second):
		err = errors.New("dbus-daemon did not start within 30s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		l.stopDaemon()
	}
	return err
}

func (l *Logind) stopDaemon() {
	if l.daemon != nil {
		_ = l.daemon.Process.Kill()
		_ = l.daemon.Wait()
	}
}

// serve connects to the bus, exports the manager and takes the name.
func (l *Logind) serve(ctx context.Context) error {
	conn, err := dbus.Connect(l.address, dbus.WithContext(ctx), dbus.WithIncomingInterceptor(l.takeInhibitReply))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", l.address, err)
	}
	l.conn = conn
	methods := map[string]any{
		"Inhibit":        l.inhibit,
		"ListInhibitors": l.listInhibitors,
		"PowerOff":       func(interactive bool) *dbus.Error { return l.powerOff("power off") },
		"Reboot":         func(interactive bool) *dbus.Error { return l.powerOff("reboot") },
	}
	if err := conn.ExportMethodTable(methods, ObjectPath, Interface); err != nil {
		return err
	}
	props := prop.Map{Interface: {
		"InhibitDelayMaxUSec":  {Value: uint64(l.opts.InhibitDelayMax / time.Microsecond), Emit: prop.EmitFalse},
		"PreparingForShutdown": {Value: false, Emit: prop.EmitFalse},
	}}
	if l.props, err = prop.Export(conn, ObjectPath, props); err != nil {
		return err
	}
	node := &introspect.Node{
		Name: string(ObjectPath),
		Interfaces: []introspect.Interface{
			introspect.IntrospectData,
			prop.IntrospectData,
			{
				Name: Interface,
				Methods: []introspect.Method{
					{Name: "Inhibit", Args: []introspect.Arg{
						{Name: "what", Type: "s", Direction: "in"}, {Name: "who", Type: "s", Direction: "in"},
						{Name: "why", Type: "s", Direction: "in"}, {Name: "mode", Type: "s", Direction: "in"},
						{Name: "pipe_fd", Type: "h", Direction: "out"}}},
					{Name: "ListInhibitors", Args: []introspect.Arg{{Name: "inhibitors", Type: "a(ssssuu)", Direction: "out"}}},
					{Name: "PowerOff", Args: []introspect.Arg{{Name: "interactive", Type: "b", Direction: "in"}}},
					{Name: "Reboot", Args: []introspect.Arg{{Name: "interactive", Type: "b", Direction: "in"}}},
				},
				Signals:    []introspect.Signal{{Name: "PrepareForShutdown", Args: []introspect.Arg{{Name: "start", Type: "b"}}}},
				Properties: l.props.Introspection(Interface),
			},
		},
	}
	if err := conn.Export(introspect.NewIntrospectable(node), ObjectPath, "org.freedesktop.DBus.Introspectable"); err != nil {
		return err
	}
	reply, err := conn.RequestName(BusName, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("requesting %s: %w", BusName, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return fmt.Errorf("%s is already owned on %s", BusName, l.address)
	}
	return nil
}

// Address returns the bus address ("unix:path=…"), the value for
// DBUS_SYSTEM_BUS_ADDRESS.
func (l *Logind) Address() string { return l.address }

// Stop stops serving: it stops the bus, which releases every lock, and a
// pending PowerOff no longer calls OnPowerOff. Safe to call twice.
func (l *Logind) Stop() {
	l.stopOnce.Do(func() {
		close(l.stopped)
		if l.conn != nil {
			_ = l.conn.Close()
		}
		l.stopDaemon()
		l.mu.Lock()
		defer l.mu.Unlock()
		for id, lk := range l.locks {
			_ = lk.read.Close()
			delete(l.locks, id)
		}
	})
}

// Inhibitors returns the locks held now, oldest first.
func (l *Logind) Inhibitors() []Inhibitor {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := slices.Sorted(maps.Keys(l.locks))
	out := make([]Inhibitor, 0, len(ids))
	for _, id := range ids {
		out = append(out, l.locks[id].Inhibitor)
	}
	return out
}

// takeInhibitReply runs for every incoming message before godbus
// dispatches it. For an Inhibit call it takes the reply away from godbus
// (marking the call as wanting none) and notes that inhibit owes it.
//
// Why: the lock is a pipe whose write end the caller holds, and it lasts
// until every copy of that end is closed, ours included. godbus would send
// its reply, and the descriptor with it, only after inhibit returned and
// without telling anyone when; closing our copy before then would send a
// closed (or reused) descriptor, and keeping it would keep the lock
// forever. Sending the reply ourselves tells us when the kernel holds the
// descriptor in flight, and our copy can go at once, as in logind.
func (l *Logind) takeInhibitReply(msg *dbus.Message) {
	if msg.Type != dbus.TypeMethodCall || msg.Flags&dbus.FlagNoReplyExpected != 0 {
		return
	}
	member, _ := msg.Headers[dbus.FieldMember].Value().(string)
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	iface, _ := msg.Headers[dbus.FieldInterface].Value().(string)
	if member != "Inhibit" || path != ObjectPath || iface != Interface {
		return
	}
	msg.Flags |= dbus.FlagNoReplyExpected
	l.owed.Store(replyKey(msg), true)
}

func replyKey(msg *dbus.Message) string {
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	return fmt.Sprintf("%s/%d", sender, msg.Serial())
}

// inhibit implements Inhibit(s what, s who, s why, s mode) → h: the caller
// holds the lock while it keeps the returned file descriptor open. Errors
// go back through godbus; the reply with the descriptor is sent here (see
// takeInhibitReply).
func (l *Logind) inhibit(msg dbus.Message, what, who, why, mode string) *dbus.Error {
	_, owed := l.owed.LoadAndDelete(replyKey(&msg))
	if err := checkInhibit(what, mode); err != nil {
		return dbus.NewError(errInvalidArgs, []any{err.Error()})
	}
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	i := Inhibitor{What: what, Who: who, Why: why, Mode: mode}
	// As logind does, the caller's credentials come from the bus.
	bus := l.conn.BusObject()
	_ = bus.Call("org.freedesktop.DBus.GetConnectionUnixUser", 0, sender).Store(&i.UID)
	_ = bus.Call("org.freedesktop.DBus.GetConnectionUnixProcessID", 0, sender).Store(&i.PID)

	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return dbus.MakeFailedError(err)
	}
	// Only our end is non-blocking, so that its reads wait in the poller.
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return dbus.MakeFailedError(err)
	}
	lk := &lock{Inhibitor: i, taken: time.Now(), read: os.NewFile(uintptr(p[0]), "inhibit")}
	// Our copy of the write end goes once the reply is sent (or not
	// sent): from then on the lock is the caller's alone.
	defer unix.Close(p[1])

	l.mu.Lock()
	if l.shuttingDown && strings.Contains(what, "shutdown") {
		l.mu.Unlock()
		_ = lk.read.Close()
		return dbus.NewError(errOperationInProgress, []any{"The operation inhibition has been requested for is already running"})
	}
	l.nextID++
	id := l.nextID
	l.locks[id] = lk
	l.mu.Unlock()
	go l.watch(id, lk)
	l.log.Info("inhibitor lock taken", "who", who, "what", what, "mode", mode, "why", why, "uid", i.UID, "pid", i.PID)

	if owed {
		reply := &dbus.Message{
			Type: dbus.TypeMethodReply,
			Headers: map[dbus.HeaderField]dbus.Variant{
				dbus.FieldDestination: dbus.MakeVariant(sender),
				dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial()),
				dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(dbus.UnixFD(0))),
			},
			Body: []any{dbus.UnixFD(p[1])},
		}
		// Send returns once the message is written to the bus socket:
		// the descriptor is then in flight, held by the kernel.
		l.conn.Send(reply, nil)
	}
	return nil
}

// checkInhibit validates Inhibit's arguments as logind does.
func checkInhibit(what, mode string) error {
	if mode != "block" && mode != "delay" {
		return fmt.Errorf("invalid mode %q", mode)
	}
	if what == "" {
		return errors.New("invalid what specification")
	}
	for w := range strings.SplitSeq(what, ":") {
		switch w {
		case "shutdown", "sleep":
		case "idle", "handle-power-key", "handle-suspend-key", "handle-hibernate-key", "handle-lid-switch", "handle-reboot-key":
			if mode == "delay" {
				return errors.New("delay inhibitors only supported for shutdown and sleep")
			}
		default:
			return fmt.Errorf("invalid what specification %q", what)
		}
	}
	return nil
}

// watch waits until every copy of the lock's write end is closed (EOF on
// the read end), then drops the lock.
func (l *Logind) watch(id int, lk *lock) {
	buf := make([]byte, 64)
	for {
		if _, err := lk.read.Read(buf); err != nil {
			break
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.locks[id]; !ok {
		return // Stop closed it
	}
	delete(l.locks, id)
	_ = lk.read.Close()
	close(l.changed)
	l.changed = make(chan struct{})
	l.log.Info("inhibitor lock released", "who", lk.Who, "pid", lk.PID, "held", time.Since(lk.taken).Round(time.Millisecond))
}

// listInhibitors implements ListInhibitors() → a(ssssuu).
func (l *Logind) listInhibitors() ([]Inhibitor, *dbus.Error) {
	return l.Inhibitors(), nil
}

// powerOff implements PowerOff(b) and Reboot(b): it returns at once and
// shuts down in the background. A second call during a shutdown is a no-op.
func (l *Logind) powerOff(action string) *dbus.Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shuttingDown {
		l.log.Info("shutdown already in progress, ignoring", "action", action)
		return nil
	}
	l.shuttingDown = true
	go l.shutdown(action)
	return nil
}

// shutdown announces the shutdown, waits for the delay locks and calls
// OnPowerOff.
func (l *Logind) shutdown(action string) {
	start := time.Now()
	l.props.SetMust(Interface, "PreparingForShutdown", true)
	if err := l.conn.Emit(ObjectPath, Interface+".PrepareForShutdown", true); err != nil {
		l.log.Error("emitting PrepareForShutdown", "err", err)
	}
	l.log.Info("shutdown: PrepareForShutdown(true) sent, waiting for delay locks", "action", action,
		"delayLocks", l.delayLocks(), "inhibitDelayMax", l.opts.InhibitDelayMax)
	deadline := time.NewTimer(l.opts.InhibitDelayMax)
	defer deadline.Stop()
wait:
	for {
		l.mu.Lock()
		held := l.delayLocksLocked()
		changed := l.changed
		l.mu.Unlock()
		if len(held) == 0 {
			l.log.Info("shutdown: all inhibitor locks released", "action", action, "after", time.Since(start).Round(time.Millisecond))
			break
		}
		select {
		case <-changed:
		case <-deadline.C:
			l.log.Warn("inhibit delay expired with locks held by "+strings.Join(held, ", "), "action", action,
				"after", time.Since(start).Round(time.Millisecond))
			break wait
		case <-l.stopped:
			return
		}
	}
	select {
	case <-l.stopped:
		return
	default:
	}
	l.offOnce.Do(l.opts.OnPowerOff)
}

// delayLocks names the holders of shutdown delay locks.
func (l *Logind) delayLocks() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delayLocksLocked()
}

func (l *Logind) delayLocksLocked() []string {
	var held []string
	for _, lk := range l.locks {
		if lk.Mode == "delay" && slices.Contains(strings.Split(lk.What, ":"), "shutdown") {
			held = append(held, lk.String())
		}
	}
	slices.Sort(held)
	return held
}

// PowerOff asks the logind at address to power off, as `systemctl
// poweroff` does: the call returns once the shutdown has begun.
func PowerOff(ctx context.Context, address string) error {
	conn, err := dbus.Connect(address, dbus.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", address, err)
	}
	defer conn.Close()
	return conn.Object(BusName, ObjectPath).CallWithContext(ctx, Interface+".PowerOff", 0, false).Err
}

// Inhibitors lists the inhibitor locks of the logind at address.
func Inhibitors(ctx context.Context, address string) ([]Inhibitor, error) {
	conn, err := dbus.Connect(address, dbus.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", address, err)
	}
	defer conn.Close()
	var out []Inhibitor
	err = conn.Object(BusName, ObjectPath).CallWithContext(ctx, Interface+".ListInhibitors", 0).Store(&out)
	return out, err
}
