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
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/internal/testbed/logind"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/metrics"
	"fenced.io/fenced/pkg/vocab"
)

// TestAgentRunsAgainstARealAPIServer starts a control plane, registers the
// agent's Node, and runs `fenced agent` until it is stopped: it must join
// the ring, notify systemd, serve health and metrics, take a logind
// shutdown delay lock, see the kubelet's (graceful node shutdown) and say
// so on its Lease and in a metric, handle the host's shutdown (announce,
// leave, release the lock) and stop cleanly.
func TestAgentRunsAgainstARealAPIServer(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
	if _, err := c.Client().CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// fenced's namespace (fencer.leaseNamespace's default), for the
	// agent's key Lease.
	if _, err := c.CreateNamespace(ctx, "fenced-system"); err != nil {
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
	// The kubelet, with shutdownGracePeriod set, holds its delay lock
	// (k8s.io/kubernetes pkg/kubelet/nodeshutdown/systemd) before the
	// agent starts.
	kubeletBus, err := dbus.Connect(ld.Address())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kubeletBus.Close() })
	var kubeletLock dbus.UnixFD
	if err := kubeletBus.Object(logind.BusName, logind.ObjectPath).Call(logind.Interface+".Inhibit", 0,
		"shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay").Store(&kubeletLock); err != nil {
		t.Fatal(err)
	}
	kubeletLockFile := os.NewFile(uintptr(kubeletLock), "kubelet-lock")
	t.Cleanup(func() { kubeletLockFile.Close() })
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
	addr := regexp.MustCompile(`"msg":"serving metrics and health","component":"agent","address":"([^"]+)"`).FindStringSubmatch(stderr.String())
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
		return slices.ContainsFunc(ld.Inhibitors(), func(l logind.Inhibitor) bool { return l.Who == "fenced" && l.Mode == "delay" }), nil
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
	requireMetric(metrics.KubeletGracefulShutdownMetric + " 1")
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		l, err := c.Client().CoordinationV1().Leases("fenced-system").Get(ctx, publish.LeaseName("node-a"), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		n, g, ok := publish.GracefulShutdownOf(l)
		return ok && n == "node-a" && g == vocab.GracefulKubeletDelayLock, nil
	})
	if err != nil {
		t.Errorf("the agent's Lease does not say %s=%s: %v; agent log:\n%s", publish.AnnotationGracefulShutdown, vocab.GracefulKubeletDelayLock, err, stderr)
	}
	// The kubelet is done with its pods: it lets go, as it does on
	// PrepareForShutdown, so that only the agent's lock holds logind up.
	if err := kubeletLockFile.Close(); err != nil {
		t.Fatal(err)
	}
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
		`"msg":"the kubelet has graceful node shutdown: it holds a logind shutdown delay lock"`,
		`"msg":"no CSI volume mounted any more: announced shutdown-complete"`, `"msg":"agent stopping"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
	if !strings.Contains(strings.Join(notes, "\n"), "STATUS=observer: 1 of 1 gossip members alive") {
		t.Errorf("notifications %q lack the STATUS line", notes)
	}
}

// TestFencerAgentReportsStaleAttachment runs `fenced agent` as a fencer
// (a BMC inventory) against a real API server holding a VolumeAttachment
// on a Ready node that nothing there uses: the agent wires the stale
// VolumeAttachment report to its informers, metrics and Events, and after
// policy.staleAttachmentGrace the gauge reads 1 — and, the switch being off,
// the VolumeAttachment stays.
func TestFencerAgentReportsStaleAttachment(t *testing.T) {
	// No node lifecycle controller: node-b has no kubelet and must stay Ready.
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true, Controllers: []string{"serviceaccount-controller"}})
	client := c.Client()
	if _, err := c.CreateNamespace(ctx, "fenced-system"); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}},
	} {
		created, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now}}
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "csi.fenced.test", VolumeHandle: "pv-1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "va-1"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "csi.fenced.test", NodeName: "node-b",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-1")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	port, err := ipmisim.FreePort("udp", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	bmcPort, err := ipmisim.FreePort("udp", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key := writeFile(t, dir, "key", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n") // 32 bytes
	pw := writeFile(t, dir, "bmc-password", "secret\n")
	// node-b's BMC answers nobody (nothing listens there): the report does
	// not need it.
	cfg := writeFile(t, dir, "config.yaml", "apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\nclusterName: test\n"+
		"gossip: {port: "+strconv.Itoa(port)+", keyFile: "+key+"}\n"+
		"shutdown: {announce: false}\nfencer: {monitorInterval: 0s}\npolicy: {staleAttachmentGrace: 10s}\n"+
		"bmc:\n  defaults: {protocol: ipmi, username: admin, passwordFile: "+pw+"}\n"+
		"  nodes: [{name: node-b, address: 127.0.0.1, port: "+strconv.Itoa(bmcPort)+"}]\n")
	t.Setenv("FENCED_BOOT_ID", "boot-1")
	t.Setenv("NOTIFY_SOCKET", "")

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"agent", "--config", cfg, "--kubeconfig", c.Kubeconfig, "--node-name", "node-a",
			"--gossip-bind-address", "127.0.0.1", "--log-format", "json", "--metrics-address", "127.0.0.1:0"}, io.Discard, stderr)
	}()
	var addr []string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		addr = regexp.MustCompile(`"msg":"serving metrics and health","component":"agent","address":"([^"]+)"`).FindStringSubmatch(stderr.String())
		return addr != nil, nil
	})
	if err != nil {
		t.Fatalf("no metrics address logged: %s", stderr)
	}
	want := "\n" + metrics.StaleAttachmentsMetric + " 1\n"
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + addr[1] + "/metrics")
		if err != nil {
			return false, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(body), want), nil
	})
	if err != nil {
		t.Fatalf("/metrics never showed %q: %v; agent log:\n%s", strings.TrimSpace(want), err, stderr)
	}
	if !strings.Contains(stderr.String(), `"decision":"reported","va":"va-1","node":"node-b","volume":"pv-1"`) {
		t.Errorf("no reported decision for va-1 in the log:\n%s", stderr)
	}
	if _, err := client.StorageV1().VolumeAttachments().Get(ctx, "va-1", metav1.GetOptions{}); err != nil {
		t.Errorf("va-1 with policy.deleteStaleVolumeAttachments off: %v", err)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit code %d: %s", code, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
}

// TestClientCertificateFromKubeconfig: the agent's certificate gauges read
// the file a kubeconfig names (as `fenced credentials issue` writes it)
// afresh each time, or the data embedded in it; a token has none.
func TestClientCertificateFromKubeconfig(t *testing.T) {
	file := writeFile(t, t.TempDir(), "client.pem", "first")
	for _, tc := range []struct {
		name string
		tls  rest.TLSClientConfig
		want string // "": no reader
	}{
		{"certificate file", rest.TLSClientConfig{CertFile: file, KeyFile: file}, "renewed"},
		{"embedded certificate", rest.TLSClientConfig{CertData: []byte("embedded"), KeyData: []byte("key")}, "embedded"},
		{"token", rest.TLSClientConfig{}, ""},
	} {
		read := clientCertificate(tc.tls)
		if read == nil {
			if tc.want != "" {
				t.Errorf("%s: no reader, want one reading %q", tc.name, tc.want)
			}
			continue
		}
		if err := os.WriteFile(file, []byte("renewed"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := read(); err != nil || string(got) != tc.want {
			t.Errorf("%s: read %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
