package logind

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/login1"
	"github.com/godbus/dbus/v5"

	"fenced.io/fenced/internal/testbed/poll"
)

// instance is a stand-in under test, with what it logged and a channel
// that receives when OnPowerOff is called.
type instance struct {
	*Logind
	off  chan time.Time
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start starts a stand-in with delay max, or skips when dbus-daemon is
// not installed.
func start(t *testing.T, delay time.Duration) *instance {
	t.Helper()
	// Not t.TempDir: test names would make the socket path too long.
	dir, err := os.MkdirTemp("", "logind-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	in := &instance{off: make(chan time.Time, 2), logs: &syncBuffer{}}
	l, err := Start(context.Background(), Options{
		Dir:             dir,
		InhibitDelayMax: delay,
		OnPowerOff:      func() { in.off <- time.Now() },
		Logger:          slog.New(slog.NewTextHandler(in.logs, nil)),
	})
	if errors.Is(err, ErrNoDBusDaemon) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	in.Logind = l
	t.Cleanup(l.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logind log:\n%s", in.logs)
		}
	})
	return in
}

// connect opens a client connection to the stand-in's bus.
func connect(t *testing.T, l *Logind) *dbus.Conn {
	t.Helper()
	conn, err := dbus.Connect(l.Address())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// inhibit takes a lock the way the kubelet does (the descriptor stored in
// a uint32) and returns it as a file.
func inhibit(t *testing.T, conn *dbus.Conn, what, who, mode string) *os.File {
	t.Helper()
	var fd uint32
	err := conn.Object(BusName, ObjectPath).Call(Interface+".Inhibit", 0, what, who, "testing", mode).Store(&fd)
	if err != nil {
		t.Fatalf("Inhibit(%s, %s): %v", what, mode, err)
	}
	f := os.NewFile(uintptr(fd), "inhibit")
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// subscribe returns a channel of PrepareForShutdown values.
func subscribe(t *testing.T, conn *dbus.Conn) <-chan bool {
	t.Helper()
	if err := conn.AddMatchSignal(dbus.WithMatchInterface(Interface), dbus.WithMatchMember("PrepareForShutdown"), dbus.WithMatchObjectPath(ObjectPath)); err != nil {
		t.Fatal(err)
	}
	signals := make(chan *dbus.Signal, 10)
	conn.Signal(signals)
	out := make(chan bool, 10)
	go func() {
		for s := range signals {
			if s.Name == Interface+".PrepareForShutdown" && len(s.Body) == 1 {
				if b, ok := s.Body[0].(bool); ok {
					out <- b
				}
			}
		}
	}()
	return out
}

func powerOff(t *testing.T, l *Logind) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := PowerOff(ctx, l.Address()); err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	return t0
}

// longDelay is InhibitDelayMax in the tests where PowerOff must go on at
// once (no lock holds it, or the lock is released): promptly, half of it,
// is how soon. Far beyond a loaded machine's D-Bus round trips, yet a
// stand-in that waited the delay out instead would still fail.
const (
	longDelay = 20 * time.Second
	promptly  = longDelay / 2
)

func waitSignal(t *testing.T, ch <-chan bool) {
	t.Helper()
	select {
	case b := <-ch:
		if !b {
			t.Fatal("PrepareForShutdown(false), want true")
		}
	case <-time.After(promptly):
		t.Fatalf("no PrepareForShutdown signal within %s", promptly)
	}
}

func waitOff(t *testing.T, in *instance, within time.Duration) time.Time {
	t.Helper()
	select {
	case at := <-in.off:
		return at
	case <-time.After(within):
		t.Fatalf("OnPowerOff not called within %s", within)
	}
	return time.Time{}
}

func requireNotOff(t *testing.T, in *instance, during time.Duration) {
	t.Helper()
	select {
	case <-in.off:
		t.Fatal("OnPowerOff called while a delay lock was held")
	case <-time.After(during):
	}
}

func TestProperties(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		want  uint64
	}{
		{"default", 0, uint64(DefaultInhibitDelayMax / time.Microsecond)},
		{"configured", 1500 * time.Millisecond, 1_500_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := start(t, tc.delay)
			obj := connect(t, l.Logind).Object(BusName, ObjectPath)
			// As the kubelet reads it.
			v, err := obj.GetProperty(Interface + ".InhibitDelayMaxUSec")
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := v.Value().(uint64); !ok || got != tc.want {
				t.Errorf("InhibitDelayMaxUSec = %v (%T), want %d", v.Value(), v.Value(), tc.want)
			}
			var all map[string]dbus.Variant
			if err := obj.Call("org.freedesktop.DBus.Properties.GetAll", 0, Interface).Store(&all); err != nil {
				t.Fatal(err)
			}
			if all["PreparingForShutdown"].Value() != false {
				t.Errorf("PreparingForShutdown = %v, want false", all["PreparingForShutdown"])
			}
			var xml string
			if err := obj.Call("org.freedesktop.DBus.Introspectable.Introspect", 0).Store(&xml); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{`"Inhibit"`, `"PrepareForShutdown"`, `"InhibitDelayMaxUSec"`} {
				if !strings.Contains(xml, want) {
					t.Errorf("introspection lacks %s:\n%s", want, xml)
				}
			}
		})
	}
}

func TestInhibitArguments(t *testing.T) {
	l := start(t, 0)
	conn := connect(t, l.Logind)
	obj := conn.Object(BusName, ObjectPath)
	for _, tc := range []struct {
		what, mode string
		ok         bool
	}{
		{"shutdown", "delay", true},
		{"sleep:shutdown", "delay", true},
		{"shutdown", "block", true},
		{"idle", "block", true},
		{"idle", "delay", false},
		{"shutdown", "maybe", false},
		{"", "delay", false},
		{"shutdown:coffee", "delay", false},
	} {
		var fd dbus.UnixFD
		err := obj.Call(Interface+".Inhibit", 0, tc.what, "test", "why", tc.mode).Store(&fd)
		if (err == nil) != tc.ok {
			t.Errorf("Inhibit(%q, %q): err = %v, want ok %v", tc.what, tc.mode, err, tc.ok)
		}
		if err == nil {
			_ = syscall.Close(int(fd))
		}
	}
}

func TestListInhibitors(t *testing.T) {
	l := start(t, 0)
	conn := connect(t, l.Logind)
	inhibit(t, conn, "shutdown", "kubelet", "delay")
	inhibit(t, conn, "sleep", "agent", "block")
	// A lock its holder closed goes at once, as in logind: the stand-in
	// keeps no copy of the descriptor.
	gone := inhibit(t, conn, "shutdown", "gone", "delay")
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	var got []Inhibitor
	var err error
	poll.Until(t, time.Minute, "the closed lock is gone from the list", func() bool {
		got, err = Inhibitors(context.Background(), l.Address())
		return err != nil || len(got) <= 2
	})
	if err != nil {
		t.Fatal(err)
	}
	uid, pid := uint32(os.Getuid()), uint32(os.Getpid())
	want := []Inhibitor{
		{What: "shutdown", Who: "kubelet", Why: "testing", Mode: "delay", UID: uid, PID: pid},
		{What: "sleep", Who: "agent", Why: "testing", Mode: "block", UID: uid, PID: pid},
	}
	if len(got) != len(want) {
		t.Fatalf("ListInhibitors = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("inhibitor %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestPowerOffWaitsForDelayLock is the kubelet's protocol: take a delay
// lock, see PrepareForShutdown(true), clean up, close the descriptor.
func TestPowerOffWaitsForDelayLock(t *testing.T) {
	l := start(t, longDelay)
	conn := connect(t, l.Logind)
	lock := inhibit(t, conn, "shutdown", "kubelet", "delay")
	signals := subscribe(t, conn)

	t0 := powerOff(t, l.Logind)
	waitSignal(t, signals)
	requireNotOff(t, l, 500*time.Millisecond)
	v, err := conn.Object(BusName, ObjectPath).GetProperty(Interface + ".PreparingForShutdown")
	if err != nil || v.Value() != true {
		t.Errorf("PreparingForShutdown = %v, %v; want true", v, err)
	}
	// A new shutdown lock is refused while the shutdown runs, and a
	// second PowerOff changes nothing.
	var fd dbus.UnixFD
	if err := conn.Object(BusName, ObjectPath).Call(Interface+".Inhibit", 0, "shutdown", "late", "why", "delay").Store(&fd); err == nil {
		t.Error("Inhibit during a shutdown succeeded")
	}
	powerOff(t, l.Logind)

	released := time.Now()
	if err := lock.Close(); err != nil {
		t.Fatal(err)
	}
	off := waitOff(t, l, promptly)
	if off.Before(released) {
		t.Errorf("OnPowerOff at %s, before the lock was released", off.Sub(t0))
	}
	if !strings.Contains(l.logs.String(), "shutdown: all inhibitor locks released") {
		t.Errorf("log lacks the release message:\n%s", l.logs)
	}
	requireNotOff(t, l, 200*time.Millisecond) // only once
	t.Logf("OnPowerOff %s after PowerOff, %s after the lock was closed", off.Sub(t0).Round(time.Millisecond), off.Sub(released).Round(time.Millisecond))
}

func TestInhibitDelayExpires(t *testing.T) {
	const delay = 700 * time.Millisecond
	l := start(t, delay)
	conn := connect(t, l.Logind)
	inhibit(t, conn, "shutdown", "stubborn", "delay") // never closed before the end

	t0 := powerOff(t, l.Logind)
	off := waitOff(t, l, 10*time.Second)
	if d := off.Sub(t0); d < delay {
		t.Errorf("OnPowerOff after %s, want at least InhibitDelayMax %s", d, delay)
	}
	if !strings.Contains(l.logs.String(), "inhibit delay expired with locks held by stubborn") {
		t.Errorf("log lacks the expiry message:\n%s", l.logs)
	}
}

// TestLocksThatDoNotDelay: no lock, a released lock, a block lock and a
// sleep lock let PowerOff proceed at once.
func TestLocksThatDoNotDelay(t *testing.T) {
	for _, tc := range []struct {
		name string
		take func(t *testing.T, conn *dbus.Conn)
	}{
		{"none", func(*testing.T, *dbus.Conn) {}},
		{"released before", func(t *testing.T, conn *dbus.Conn) { _ = inhibit(t, conn, "shutdown", "gone", "delay").Close() }},
		{"block", func(t *testing.T, conn *dbus.Conn) { inhibit(t, conn, "shutdown", "blocker", "block") }},
		{"sleep", func(t *testing.T, conn *dbus.Conn) { inhibit(t, conn, "sleep", "sleeper", "delay") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := start(t, longDelay)
			tc.take(t, connect(t, l.Logind))
			t0 := powerOff(t, l.Logind)
			if d := waitOff(t, l, promptly).Sub(t0); d > promptly {
				t.Errorf("OnPowerOff after %s, want at once (not after InhibitDelayMax %s)", d, longDelay)
			}
		})
	}
}

// TestHolderDies: a lock ends with its holder's process, as the kernel
// closes its descriptor; the holder here is this test binary re-executed.
func TestHolderDies(t *testing.T) {
	l := start(t, longDelay)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+l.Address())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("holder said %q, %v", line, err)
	}
	held, err := Inhibitors(context.Background(), l.Address())
	if err != nil || len(held) != 1 || held[0].PID != uint32(cmd.Process.Pid) {
		t.Fatalf("ListInhibitors = %+v, %v; want one lock of pid %d", held, err, cmd.Process.Pid)
	}

	t0 := powerOff(t, l.Logind)
	requireNotOff(t, l, 500*time.Millisecond)
	died := time.Now()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	off := waitOff(t, l, promptly)
	if off.Before(died) {
		t.Errorf("OnPowerOff %s after PowerOff, before the holder died", off.Sub(t0))
	}
	t.Logf("OnPowerOff %s after the holder died", off.Sub(died).Round(time.Millisecond))
}

// holderEnv makes the test binary a lock holder for TestHolderDies: it
// takes a shutdown delay lock on the bus at the variable's value, says
// "locked" and waits to be killed.
const holderEnv = "LOGIND_TEST_HOLDER"

func TestMain(m *testing.M) {
	if address := os.Getenv(holderEnv); address != "" {
		conn, err := dbus.Connect(address)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		var fd dbus.UnixFD
		if err := conn.Object(BusName, ObjectPath).Call(Interface+".Inhibit", 0, "shutdown", "holder", "testing", "delay").Store(&fd); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("locked")
		select {}
	}
	os.Exit(m.Run())
}

func TestStopCancelsPowerOff(t *testing.T) {
	l := start(t, longDelay)
	conn := connect(t, l.Logind)
	inhibit(t, conn, "shutdown", "kubelet", "delay")
	powerOff(t, l.Logind)
	l.Stop()
	requireNotOff(t, l, 500*time.Millisecond)
}

// TestGoSystemdClient drives the stand-in with go-systemd's login1
// package, which finds the bus through DBUS_SYSTEM_BUS_ADDRESS.
func TestGoSystemdClient(t *testing.T) {
	l := start(t, longDelay)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", l.Address())
	c, err := login1.New()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lock, err := c.Inhibit("shutdown", "fenced", "waiting for volumes", "delay")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	signals := c.Subscribe("PrepareForShutdown")

	t0 := powerOff(t, l.Logind)
	select {
	case s := <-signals:
		if s.Name != Interface+".PrepareForShutdown" || len(s.Body) != 1 || s.Body[0] != true {
			t.Fatalf("signal %s %v, want PrepareForShutdown(true)", s.Name, s.Body)
		}
	case <-time.After(promptly):
		t.Fatalf("no PrepareForShutdown within %s", promptly)
	}
	requireNotOff(t, l, 300*time.Millisecond)
	released := time.Now()
	lock.Close()
	if off := waitOff(t, l, promptly); off.Before(released) {
		t.Errorf("OnPowerOff %s after PowerOff, before the lock was released", off.Sub(t0))
	}
}
