package shutdown

import (
	"errors"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"fenced.io/fenced/internal/testbed/logind"
	"fenced.io/fenced/pkg/vocab"
)

// kubeletWhy is the reason the kubelet gives for its lock (not matched).
const kubeletWhy = "Kubelet needs time to handle node shutdown"

// takeLock takes an inhibitor lock on the test logind at address, on a
// connection of its own (another process, as the kubelet is), until the
// test ends.
func takeLock(t *testing.T, address, what, who, mode string) {
	t.Helper()
	conn, err := dbus.Connect(address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var fd dbus.UnixFD
	if err := conn.Object(logind.BusName, logind.ObjectPath).Call(logind.Interface+".Inhibit", 0, what, who, kubeletWhy, mode).Store(&fd); err != nil {
		t.Fatalf("Inhibit(%s, %s, %s): %v", what, who, mode, err)
	}
	// A lock lasts while its descriptor is open.
	t.Cleanup(func() { _ = unix.Close(int(fd)) })
}

// TestProbeGracefulWithLogind asks a logind on a real bus (dbus-daemon)
// for the kubelet's shutdown delay lock: only the lock the kubelet takes
// when shutdownGracePeriod is set counts; other locks, fenced's own
// included, do not.
func TestProbeGracefulWithLogind(t *testing.T) {
	for _, tc := range []struct {
		name  string
		locks [][3]string // what, who, mode
		want  vocab.GracefulShutdown
	}{
		{"kubelet delay lock", [][3]string{{"shutdown", "kubelet", "delay"}}, vocab.GracefulKubeletDelayLock},
		{"among others", [][3]string{{"sleep", "agent", "block"}, {"shutdown", "fenced", "delay"}, {"sleep:shutdown", "kubelet", "delay"}}, vocab.GracefulKubeletDelayLock},
		{"no lock", nil, vocab.GracefulNone},
		{"only fenced's", [][3]string{{"shutdown", "fenced", "delay"}}, vocab.GracefulNone},
		{"kubelet block lock", [][3]string{{"shutdown", "kubelet", "block"}}, vocab.GracefulNone},
		{"kubelet sleep lock", [][3]string{{"sleep", "kubelet", "delay"}}, vocab.GracefulNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ld, _ := startLogind(t, 45*time.Second)
			for _, l := range tc.locks {
				takeLock(t, ld.Address(), l[0], l[1], l[2])
			}
			c := ProbeGraceful(nil)
			if c.State != tc.want || c.Err != nil {
				t.Fatalf("ProbeGraceful = %+v; want %s (locks %v)", c, tc.want, ld.Inhibitors())
			}
			if c.InhibitDelayMax != 45*time.Second {
				t.Errorf("InhibitDelayMax %s, want 45s", c.InhibitDelayMax)
			}
			if (c.Lock != nil) != (tc.want == vocab.GracefulKubeletDelayLock) || (c.Lock != nil && c.Lock.Who != "kubelet") {
				t.Errorf("Lock %+v", c.Lock)
			}
		})
	}
}

// TestProbeGracefulKubeletComesAndGoes: the answer follows the lock, as
// the agent's periodic check relies on (the kubelet may start after it).
func TestProbeGracefulKubeletComesAndGoes(t *testing.T) {
	ld, _ := startLogind(t, 30*time.Second)
	if c := ProbeGraceful(nil); c.State != vocab.GracefulNone {
		t.Fatalf("before the kubelet: %+v", c)
	}
	l, err := DialLogind()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lock, err := l.InhibitShutdown("kubelet", kubeletWhy)
	if err != nil {
		t.Fatal(err)
	}
	if c := ProbeGraceful(nil); c.State != vocab.GracefulKubeletDelayLock {
		t.Fatalf("with the kubelet's lock: %+v, locks %v", c, ld.Inhibitors())
	}
	if err := lock.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for c := ProbeGraceful(nil); c.State != vocab.GracefulNone; c = ProbeGraceful(nil) {
		if time.Now().After(deadline) {
			t.Fatalf("after the kubelet released its lock: %+v", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProbeGracefulWithoutLogind: no bus, or a client that cannot list
// locks, is unknown — never "none".
func TestProbeGracefulWithoutLogind(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/system_bus_socket")
	if c := ProbeGraceful(nil); c.State != vocab.GracefulUnknown || c.Err == nil {
		t.Errorf("no bus: %+v, want unknown with an error", c)
	}
	failing := func() (Logind, error) { return nil, errors.New("no logind") }
	if c := ProbeGraceful(failing); c.State != vocab.GracefulUnknown || c.Err == nil {
		t.Errorf("failed dial: %+v, want unknown with an error", c)
	}
	if c := CheckGraceful(brokenLister{}); c.State != vocab.GracefulUnknown || c.Err == nil {
		t.Errorf("ListInhibitors fails: %+v, want unknown with an error", c)
	}
}

type brokenLister struct{}

func (brokenLister) InhibitDelayMax() (time.Duration, error) { return time.Second, nil }
func (brokenLister) ListInhibitors() ([]Inhibitor, error) {
	return nil, errors.New("org.freedesktop.DBus.Error.ServiceUnknown")
}
