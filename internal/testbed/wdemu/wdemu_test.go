package wdemu

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/watchdog"
)

func start(t *testing.T) (*Watchdog, string, *atomic.Int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wd.sock")
	var fired atomic.Int64
	w, err := Start(path, func() { fired.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, watchdog.SocketPrefix + path, &fired
}

// TestSocketWatchdog: armed through the agent's socket device, the
// emulated watchdog fires W after the last pet — not while petted, not
// after the magic close — and a connection closed without it leaves it
// counting down.
func TestSocketWatchdog(t *testing.T) {
	t.Run("petted, then not: fires a timeout after the last pet", func(t *testing.T) {
		w, path, fired := start(t)
		d, err := watchdog.OpenSocket(path, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if d.Identity != Identity || d.Timeout != 2*time.Second || d.Software {
			t.Fatalf("device %+v", d)
		}
		for range 15 { // 3 s of pets, longer than the timeout
			if err := d.Pet(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if fired.Load() != 0 {
			t.Fatal("fired while petted")
		}
		_, last := w.Armed()
		poll.Until(t, 10*time.Second, "the watchdog to fire", func() bool { return fired.Load() == 1 })
		if since := time.Since(last); since < 2*time.Second {
			t.Fatalf("fired %s after the last pet, before the timeout", since)
		}
	})
	t.Run("closed without the magic close: still fires", func(t *testing.T) {
		_, path, fired := start(t)
		d, err := watchdog.OpenSocket(path, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
		poll.Until(t, 10*time.Second, "the watchdog to fire", func() bool { return fired.Load() == 1 })
	})
	t.Run("the magic close: never fires", func(t *testing.T) {
		w, path, fired := start(t)
		d, err := watchdog.OpenSocket(path, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Disarm(); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "the watchdog disarmed", func() bool { armed, _ := w.Armed(); return !armed })
		time.Sleep(1500 * time.Millisecond) // past the timeout
		if fired.Load() != 0 {
			t.Fatal("fired after the magic close")
		}
	})
	t.Run("a second run opens it again in time: it lives on", func(t *testing.T) {
		_, path, fired := start(t)
		d, err := watchdog.OpenSocket(path, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
		time.Sleep(time.Second)
		again, err := watchdog.OpenSocket(path, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		for range 10 {
			_ = again.Pet()
			time.Sleep(200 * time.Millisecond)
		}
		if fired.Load() != 0 {
			t.Fatal("fired although a new run opened and petted it in time")
		}
	})
	t.Run("refusals", func(t *testing.T) {
		_, path, _ := start(t)
		if d, err := watchdog.OpenSocket(path, 1500*time.Millisecond); err != nil || d.Timeout != 2*time.Second {
			t.Errorf("1.5 s: %+v, %v; want armed with 2 s, as the Linux device", d, err)
		} else {
			_ = d.Disarm()
		}
		if _, err := watchdog.OpenSocket(path, 500*time.Millisecond); err == nil {
			t.Error("half a second accepted")
		}
		if _, err := watchdog.OpenSocket("unix:"+filepath.Join(t.TempDir(), "none.sock"), time.Second); err == nil {
			t.Error("a missing socket accepted")
		}
	})
}
