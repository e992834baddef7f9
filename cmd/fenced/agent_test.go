package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/internal/testbed/logind"
)

// TestAgentRunsAgainstARealAPIServer starts a control plane, registers the
// agent's Node, and runs `fenced agent` until it is stopped: it must join
// the ring, notify systemd, serve health and metrics, take a logind
// shutdown delay lock, handle the host's shutdown (announce, leave,
// release the lock) and stop cleanly.
func TestAgentRunsAgainstARealAPIServer(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
	if _, err := c.Client().CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port, err := ipmisim.FreePort("udp", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key := writeFile(t, dir, "key", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n") // 32 bytes
	cfg := writeFile(t, dir, "config.yaml", "apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\nclusterName: test\n"+
		"gossip: {port: "+strconv.Itoa(port)+", keyFile: "+key+"}\n")

	// logind's stand-in on a private system bus (never the host's), started
	// before NOTIFY_SOCKET is set: dbus-daemon would notify it too.
	busDir, err := os.MkdirTemp("", "fa-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(busDir) })
	poweredOff := make(chan struct{})
	ld, err := logind.Start(ctx, logind.Options{Dir: busDir, InhibitDelayMax: 20 * time.Second,
		OnPowerOff: func() { close(poweredOff) }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ld.Stop)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", ld.Address())
	sock := filepath.Join(t.TempDir(), "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { notify.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("FENCED_BOOT_ID", "boot-1")

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"agent", "--config", cfg, "--kubeconfig", c.Kubeconfig, "--node-name", "node-a",
			"--gossip-bind-address", "127.0.0.1", "--log-format", "json", "--metrics-address", "127.0.0.1:0",
			"--kubelet-root-dir", filepath.Join(dir, "kubelet")}, io.Discard, stderr)
	}()

	readNotify := func() string {
		buf := make([]byte, 256)
		_ = notify.SetReadDeadline(time.Now().Add(60 * time.Second))
		n, err := notify.Read(buf)
		if err != nil {
			t.Fatalf("sd_notify: %v; agent log:\n%s", err, stderr)
		}
		return string(buf[:n])
	}
	var notes []string
	for !strings.Contains(strings.Join(notes, " "), "READY=1") {
		notes = append(notes, readNotify())
	}
	addr := regexp.MustCompile(`"msg":"serving metrics and health","address":"([^"]+)"`).FindStringSubmatch(stderr.String())
	if addr == nil {
		t.Fatalf("no metrics address logged: %s", stderr)
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/metrics": `fenced_members{state="alive"} 1`} {
		resp, err := http.Get("http://" + addr[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, want %q in\n%s", path, resp.StatusCode, want, body)
		}
	}

	// The host shuts down: the agent holds a delay lock, announces, leaves
	// (no CSI volume is mounted under its kubelet dir) and lets logind go on.
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		locks := ld.Inhibitors()
		return len(locks) == 1 && locks[0].Who == "fenced" && locks[0].Mode == "delay", nil
	})
	if err != nil {
		t.Fatalf("no logind lock of the agent: %v; agent log:\n%s", ld.Inhibitors(), stderr)
	}
	requireMetric := func(want string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			resp, err := http.Get("http://" + addr[1] + "/metrics")
			if err != nil {
				return false, err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return strings.Contains(string(body), "\n"+want+"\n"), nil
		})
		if err != nil {
			t.Errorf("/metrics lacks %q: %v", want, err)
		}
	}
	requireMetric("fenced_shutdown_lock_held 1")
	if err := logind.PowerOff(ctx, ld.Address()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-poweredOff:
	case <-time.After(30 * time.Second):
		t.Fatalf("logind still held up by %v; agent log:\n%s", ld.Inhibitors(), stderr)
	}
	for !strings.Contains(strings.Join(notes, " "), "STATUS=host shutting down: announced shutdown-complete") {
		notes = append(notes, readNotify())
	}
	requireMetric("fenced_shutdown_lock_held 0")
	if resp, err := http.Get("http://" + addr[1] + "/readyz"); err != nil || resp.StatusCode == 200 {
		t.Errorf("/readyz after leaving the ring: %v %v, want not ready", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}

	cancel() // what SIGTERM does through signal.NotifyContext
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit code %d: %s", code, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
	for !strings.Contains(strings.Join(notes, " "), "STOPPING=1") {
		notes = append(notes, readNotify())
	}
	log := stderr.String()
	for _, want := range []string{`"msg":"agent started"`, `"role":"observer"`, `"boot":"boot-1"`, `"msg":"holding a logind shutdown delay lock"`,
		`"msg":"no CSI volume mounted any more: announced shutdown-complete"`, `"msg":"agent stopping"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
	if !strings.Contains(strings.Join(notes, "\n"), "STATUS=observer: 1 of 1 gossip members alive") {
		t.Errorf("notifications %q lack the STATUS line", notes)
	}
}
