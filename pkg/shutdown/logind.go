package shutdown

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/godbus/dbus/v5"
)

// Logind is the part of systemd-logind the Watcher uses: the shutdown
// delay inhibitor protocol (https://systemd.io/INHIBITOR_LOCKS/).
type Logind interface {
	// InhibitDelayMax is logind's InhibitDelayMaxSec: how long it waits
	// for delay locks before shutting down anyway.
	InhibitDelayMax() (time.Duration, error)
	// InhibitShutdown takes a shutdown delay lock; logind holds the
	// shutdown back until the lock is closed (or InhibitDelayMax passed).
	InhibitShutdown(who, why string) (io.Closer, error)
	// PrepareForShutdown delivers logind's PrepareForShutdown signal: true
	// when a shutdown begins, false when it was cancelled. The channel is
	// closed when the connection to the bus is lost.
	PrepareForShutdown() <-chan bool
	// Close ends the connection; locks taken through it stay valid until
	// they are closed themselves.
	Close() error
}

const (
	logindService   = "org.freedesktop.login1"
	logindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	logindInterface = "org.freedesktop.login1.Manager"
	// callTimeout bounds one D-Bus call; logind answers in milliseconds.
	callTimeout = 10 * time.Second
)

// dbusLogind talks to logind over the system bus with godbus, as the
// kubelet's graceful node shutdown manager does.
type dbusLogind struct {
	conn    *dbus.Conn
	obj     dbus.BusObject
	signals chan bool
}

// SystemBusSocket is the system bus's socket: where dbus-daemon listens on
// every systemd host, and where the DaemonSet mounts the host's /run/dbus.
const SystemBusSocket = "/run/dbus/system_bus_socket"

// systemBusAddress is $DBUS_SYSTEM_BUS_ADDRESS, else SystemBusSocket.
// godbus's own default, /var/run/dbus/system_bus_socket, is the same file
// on a host (/var/run links to /run) but nothing in fenced's image, which
// has no /var/run: there the agent found no logind (test/realpod).
func systemBusAddress() string {
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	return "unix:path=" + SystemBusSocket
}

// DialLogind connects to logind on the D-Bus system bus
// ($DBUS_SYSTEM_BUS_ADDRESS, else /run/dbus/system_bus_socket) and
// subscribes to PrepareForShutdown. It uses a private connection, so that
// closing it touches nothing else in the process.
func DialLogind() (Logind, error) {
	conn, err := dbus.Dial(systemBusAddress())
	if err != nil {
		return nil, fmt.Errorf("connecting to the D-Bus system bus: %w", err)
	}
	if err := conn.Auth(nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("authenticating on the D-Bus system bus: %w", err)
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("greeting the D-Bus system bus: %w", err)
	}
	// Subscribe before anything else, so no signal can slip between
	// taking the lock and listening.
	err = conn.AddMatchSignal(dbus.WithMatchObjectPath(logindPath), dbus.WithMatchInterface(logindInterface),
		dbus.WithMatchMember("PrepareForShutdown"))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("subscribing to logind's PrepareForShutdown: %w", err)
	}
	raw := make(chan *dbus.Signal, 8)
	conn.Signal(raw)
	l := &dbusLogind{conn: conn, obj: conn.Object(logindService, logindPath), signals: make(chan bool, 8)}
	// godbus closes raw when the connection ends.
	go func() {
		defer close(l.signals)
		for s := range raw {
			if s.Path != logindPath || s.Name != logindInterface+".PrepareForShutdown" || len(s.Body) != 1 {
				continue
			}
			if starting, ok := s.Body[0].(bool); ok {
				l.signals <- starting
			}
		}
	}()
	// A bus without logind answers the first call with ServiceUnknown:
	// better to find out now than at shutdown.
	if _, err := l.InhibitDelayMax(); err != nil {
		conn.Close()
		return nil, err
	}
	return l, nil
}

func (l *dbusLogind) InhibitDelayMax() (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var v dbus.Variant
	err := l.obj.CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, logindInterface, "InhibitDelayMaxUSec").Store(&v)
	if err != nil {
		return 0, fmt.Errorf("reading logind's InhibitDelayMaxUSec: %w", err)
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("logind's InhibitDelayMaxUSec is a %s, not a uint64", v.Signature())
	}
	return time.Duration(usec) * time.Microsecond, nil
}

func (l *dbusLogind) InhibitShutdown(who, why string) (io.Closer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var fd dbus.UnixFD
	if err := l.obj.CallWithContext(ctx, logindInterface+".Inhibit", 0, "shutdown", who, why, "delay").Store(&fd); err != nil {
		return nil, fmt.Errorf("taking a logind shutdown delay lock: %w", err)
	}
	return os.NewFile(uintptr(fd), "logind-inhibitor"), nil
}

func (l *dbusLogind) PrepareForShutdown() <-chan bool { return l.signals }

func (l *dbusLogind) Close() error { return l.conn.Close() }
