package systemd

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestNotifyReachesSocket stands a unixgram socket in for systemd.
func TestNotifyReachesSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)

	sent, err := Notify(Ready, Status("joined 3 members"))
	if err != nil || !sent {
		t.Fatalf("Notify = %v, %v", sent, err)
	}
	for _, want := range []string{"READY=1", "STATUS=joined 3 members"} {
		buf := make([]byte, 256)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, want)
		}
	}
}

func TestNotifyWithoutSystemdIsNoop(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Fatalf("Notify = %v, %v", sent, err)
	}
}
