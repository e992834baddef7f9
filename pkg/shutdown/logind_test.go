package shutdown

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/logind"
	"fenced.io/fenced/pkg/vocab"
)

// startLogind runs the test stand-in for systemd-logind on a private
// system bus (a real dbus-daemon) and points DBUS_SYSTEM_BUS_ADDRESS at it.
func startLogind(t *testing.T, delay time.Duration) (*logind.Logind, chan struct{}) {
	t.Helper()
	poweredOff := make(chan struct{})
	dir, err := os.MkdirTemp("", "fl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := logind.Start(context.Background(), logind.Options{Dir: dir, InhibitDelayMax: delay,
		OnPowerOff: func() { close(poweredOff) }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if errors.Is(err, logind.ErrNoDBusDaemon) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Stop)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", l.Address())
	return l, poweredOff
}

// TestDialLogind drives the D-Bus client through the inhibitor protocol
// against a logind on a real bus: the delay is read, the lock is listed
// while held, PrepareForShutdown arrives, and logind goes on only once
// the lock is closed.
func TestDialLogind(t *testing.T) {
	ld, poweredOff := startLogind(t, 30*time.Second)
	l, err := DialLogind()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d, err := l.InhibitDelayMax(); err != nil || d != 30*time.Second {
		t.Fatalf("InhibitDelayMax = %s, %v; want 30s", d, err)
	}
	lock, err := l.InhibitShutdown("fenced", "test")
	if err != nil {
		t.Fatal(err)
	}
	locks := ld.Inhibitors()
	if len(locks) != 1 || locks[0].Who != "fenced" || locks[0].Mode != "delay" || locks[0].What != "shutdown" {
		t.Fatalf("inhibitors %v, want fenced's shutdown delay lock", locks)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := logind.PowerOff(ctx, ld.Address()); err != nil {
		t.Fatal(err)
	}
	select {
	case starting := <-l.PrepareForShutdown():
		if !starting {
			t.Fatal("PrepareForShutdown(false), want true")
		}
	case <-ctx.Done():
		t.Fatal("no PrepareForShutdown signal")
	}
	select {
	case <-poweredOff:
		t.Fatal("logind powered off while the delay lock was held")
	case <-time.After(200 * time.Millisecond):
	}
	if err := lock.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-poweredOff:
	case <-ctx.Done():
		t.Fatal("logind did not go on after the lock was released")
	}
}

// TestDialLogindWithoutLogind: a bus without logind, and no bus at all,
// are errors at dial time, not surprises at shutdown.
func TestDialLogindWithoutLogind(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/system_bus_socket")
	if _, err := DialLogind(); err == nil {
		t.Fatal("DialLogind without a bus succeeded")
	}
}

// TestWatcherWithLogind runs the Watcher end to end over D-Bus: a shutdown
// with no CSI mount left ends in shutdown-complete, the leave, and only
// then logind's power-off.
func TestWatcherWithLogind(t *testing.T) {
	ld, poweredOff := startLogind(t, 30*time.Second)
	j := newJournal()
	w := New(Config{Dial: DialLogind, Ring: fakeRing{j}, Mounts: newFakeMounts(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(20 * time.Second)
	for len(ld.Inhibitors()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the Watcher took no lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer pcancel()
	if err := logind.PowerOff(pctx, ld.Address()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-poweredOff:
	case <-pctx.Done():
		t.Fatalf("no power-off; journal %q, locks %v", j.list(), ld.Inhibitors())
	}
	want := []string{"announce " + string(vocab.AnnounceShuttingDown), "announce " + string(vocab.AnnounceShutdownComplete), "leave"}
	if got := j.list(); !slices.Equal(got, want) {
		t.Fatalf("journal %q, want %q", got, want)
	}
	select {
	case <-w.Left():
	case <-time.After(20 * time.Second):
		t.Fatal("the Watcher did not report that it left")
	}
	if res := w.Result(); !res.Complete {
		t.Fatalf("result %+v", res)
	}
}

// TestSystemBusAddress: the bus is found at /run/dbus, where the
// DaemonSet mounts it, unless the environment names another; godbus's
// default (/var/run/...) does not exist in fenced's image.
func TestSystemBusAddress(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"", "unix:path=/run/dbus/system_bus_socket"},
		{"unix:path=/tmp/bus", "unix:path=/tmp/bus"},
	} {
		t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", tc.env)
		if got := systemBusAddress(); got != tc.want {
			t.Errorf("DBUS_SYSTEM_BUS_ADDRESS=%q: %q, want %q", tc.env, got, tc.want)
		}
	}
}
