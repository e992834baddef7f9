package systemd

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSystemd stands a unixgram socket in for systemd's notification socket
// and sets the environment systemd gives a unit with WatchdogSec= (an empty
// usec leaves the watchdog off).
func fakeSystemd(t *testing.T, usec string) *net.UnixConn {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", usec)
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	return conn
}

// read returns the next datagram, or "" when none arrives within d.
func read(t *testing.T, conn *net.UnixConn, d time.Duration) string {
	t.Helper()
	buf := make([]byte, 256)
	_ = conn.SetReadDeadline(time.Now().Add(d))
	n, err := conn.Read(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return ""
		}
		t.Fatalf("reading the notify socket: %v", err)
	}
	return string(buf[:n])
}

// start runs RunWatchdog in a goroutine; the channel yields its result.
func start(ctx context.Context, healthy func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- RunWatchdog(ctx, healthy) }()
	return done
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("RunWatchdog did not return")
		return nil
	}
}

func TestWatchdogPingsEveryHalfInterval(t *testing.T) {
	conn := fakeSystemd(t, "200000") // WatchdogSec=200ms: a ping every 100 ms
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := start(ctx, nil)

	var first time.Time
	const pings = 4
	for i := range pings {
		if got := read(t, conn, 5*time.Second); got != "WATCHDOG=1" {
			t.Fatalf("datagram %d = %q, want WATCHDOG=1", i, got)
		}
		if i == 0 {
			first = time.Now()
		}
	}
	// Three half-intervals between the first and the fourth ping; a ticker
	// never fires early, so anything much shorter means pinging too often.
	if el := time.Since(first); el < 250*time.Millisecond {
		t.Errorf("%d pings in %v: want one every 100 ms", pings, el)
	}

	cancel()
	if err := wait(t, done); err != nil {
		t.Fatalf("RunWatchdog after cancel = %v, want nil", err)
	}
	// A ping sent just before the cancel may still be queued; after that,
	// silence.
	for read(t, conn, 50*time.Millisecond) != "" {
	}
	if got := read(t, conn, 300*time.Millisecond); got != "" {
		t.Fatalf("ping %q after RunWatchdog returned", got)
	}
}

func TestWatchdogSkipsPingsWhileUnhealthy(t *testing.T) {
	conn := fakeSystemd(t, "100000") // a ping every 50 ms when healthy
	var healthy atomic.Bool
	var checks atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := start(ctx, func() error {
		checks.Add(1)
		if !healthy.Load() {
			return errors.New("main loop stuck")
		}
		return nil
	})

	if got := read(t, conn, 400*time.Millisecond); got != "" {
		t.Fatalf("got %q while unhealthy, want no ping", got)
	}
	if n := checks.Load(); n < 3 {
		t.Fatalf("health checked %d times in 400 ms, want one per 50 ms tick", n)
	}
	healthy.Store(true)
	if got := read(t, conn, 5*time.Second); got != "WATCHDOG=1" {
		t.Fatalf("after recovery got %q, want WATCHDOG=1", got)
	}
	cancel()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestWatchdogOffIsNoop(t *testing.T) {
	for name, env := range map[string]struct{ usec, pid string }{
		// Not under systemd, or a unit without WatchdogSec=.
		"no WATCHDOG_USEC": {"", ""},
		// The watchdog watches another process (we inherited its
		// environment): pinging would keep a hung parent alive.
		"other WATCHDOG_PID": {"200000", strconv.Itoa(os.Getpid() + 1)},
	} {
		t.Run(name, func(t *testing.T) {
			conn := fakeSystemd(t, env.usec)
			if env.pid != "" {
				t.Setenv("WATCHDOG_PID", env.pid)
			}
			// A context that never ends: RunWatchdog must return by itself.
			if err := wait(t, start(context.Background(), nil)); err != nil {
				t.Fatalf("RunWatchdog = %v, want nil", err)
			}
			if got := read(t, conn, 300*time.Millisecond); got != "" {
				t.Fatalf("sent %q without a watchdog", got)
			}
		})
	}
}

func TestWatchdogErrors(t *testing.T) {
	t.Run("malformed WATCHDOG_USEC", func(t *testing.T) {
		fakeSystemd(t, "30s")
		err := wait(t, start(context.Background(), nil))
		if err == nil || !strings.Contains(err.Error(), "WATCHDOG_USEC") {
			t.Fatalf("RunWatchdog = %v, want an error naming WATCHDOG_USEC", err)
		}
	})
	t.Run("no NOTIFY_SOCKET", func(t *testing.T) {
		fakeSystemd(t, "200000")
		t.Setenv("NOTIFY_SOCKET", "")
		err := wait(t, start(context.Background(), nil))
		if err == nil || !strings.Contains(err.Error(), "NOTIFY_SOCKET") {
			t.Fatalf("RunWatchdog = %v, want an error naming NOTIFY_SOCKET", err)
		}
	})
	t.Run("socket gone", func(t *testing.T) {
		conn := fakeSystemd(t, "200000")
		conn.Close()
		if err := wait(t, start(context.Background(), nil)); err == nil {
			t.Fatal("RunWatchdog = nil with nobody listening, want the send error")
		}
	})
}
