package harness

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/login1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenced.io/fenced/internal/testbed/csi"
	"fenced.io/fenced/pkg/shutdown"
)

// volumeGuardArg, as the first argument after "--", makes the test binary
// a volume guard (see runVolumeGuard) instead of running tests.
const volumeGuardArg = "volume-guard"

func TestMain(m *testing.M) {
	flag.Parse()
	if args := flag.Args(); len(args) == 2 && args[0] == volumeGuardArg {
		os.Exit(runVolumeGuard(args[1]))
	}
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// runVolumeGuard is what the fenced agent will do at a clean shutdown, in
// a few lines, so that this package can show the machine side working on
// its own: it holds a shutdown delay lock, and when PrepareForShutdown
// comes it releases the lock only once no CSI volume is mounted under the
// kubelet root dir root. It runs on a machine as an extra process.
func runVolumeGuard(root string) int {
	log := slog.New(slog.NewTextHandler(os.Stdout, nil)).With("component", volumeGuardArg)
	c, err := login1.New() // DBUS_SYSTEM_BUS_ADDRESS: the machine's bus
	if err != nil {
		log.Error("connecting to logind", "err", err)
		return 1
	}
	signals := c.Subscribe("PrepareForShutdown")
	lock, err := c.Inhibit("shutdown", volumeGuardArg, "waiting for CSI volumes to be unmounted", "delay")
	if err != nil {
		log.Error("taking the inhibitor lock", "err", err)
		return 1
	}
	log.Info("holding a shutdown delay lock")
	for s := range signals {
		if len(s.Body) == 1 && s.Body[0] == true {
			break
		}
	}
	log.Info("shutdown announced, waiting until no CSI volume is mounted")
	var left []string
	for {
		now, err := shutdown.MountTable{Path: shutdown.DefaultMountInfo, KubeletRootDir: root}.CSIMounts()
		if err != nil {
			log.Error("reading mountinfo", "err", err)
		} else if len(now) == 0 {
			break
		} else if len(now) != len(left) {
			log.Info("CSI volumes still mounted", "mounts", now)
			left = now
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Info("no CSI volume mounted any more, releasing the lock")
	lock.Close()
	select {} // until the machine goes off
}

// TestGracefulShutdown shuts machines down the way `systemctl poweroff`
// does and checks that the kubelet's graceful node shutdown kills the pod
// and the CSI plugin unmounts its volume before the machine goes off, and
// that a mount that cannot be unmounted keeps the machine on until logind's
// inhibit delay expires. Each machine also runs a volume guard, which
// holds a delay lock until the CSI mounts are gone.
func TestGracefulShutdown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, BMC simulators, mounts")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, h := StartForTest(t, Options{
		Machines: []string{"node-a", "node-b"},
		Extra: func(m *Machine) [][]string {
			return [][]string{{self, "-test.run=^$", "--", volumeGuardArg, m.KubeletRootDir()}}
		},
	})
	for _, m := range h.Machines {
		requireLocks(ctx, t, m)
	}
	t.Run("clean: volume unmounted, then off", func(t *testing.T) {
		t.Parallel()
		shutdownAndBoot(ctx, t, h, h.Machine("node-a"), false)
	})
	t.Run("mounts held: off when the inhibit delay expires", func(t *testing.T) {
		t.Parallel()
		shutdownAndBoot(ctx, t, h, h.Machine("node-b"), true)
	})
}

// requireLocks checks that the kubelet's shutdown manager started and that
// it and the volume guard hold shutdown delay locks.
func requireLocks(ctx context.Context, t *testing.T, m *Machine) {
	t.Helper()
	var held []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		locks, err := m.Inhibitors(ctx)
		if err != nil {
			return false, nil
		}
		held = nil
		for _, l := range locks {
			if l.What == "shutdown" && l.Mode == "delay" {
				held = append(held, l.Who)
			}
		}
		return strings.Contains(strings.Join(held, ","), "kubelet") && strings.Contains(strings.Join(held, ","), volumeGuardArg), nil
	})
	if err != nil {
		t.Fatalf("%s: shutdown delay locks held by %q, want the kubelet's and the volume guard's", m.Name, held)
	}
	kubelet := readFile(t, m.Dir+"/kubelet.log")
	if !strings.Contains(kubelet, "Creating node shutdown manager") || strings.Contains(kubelet, "Failed to start node shutdown manager") {
		t.Fatalf("%s: the kubelet's node shutdown manager did not start cleanly; kubelet.log:\n%s", m.Name, grep(kubelet, "hutdown"))
	}
	t.Logf("%s: shutdown delay locks held by %s; kubelet: %s", m.Name, strings.Join(held, ", "), grep(kubelet, "Creating node shutdown manager"))
}

func shutdownAndBoot(ctx context.Context, t *testing.T, h *Harness, m *Machine, held bool) {
	ns := "shutdown-" + m.Name
	if _, err := h.Cluster.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pv, pvc, err := csi.CreateRWOVolume(ctx, h.Cluster.Client(), ns, "data", "1Gi")
	if err != nil {
		t.Fatal(err)
	}
	must(t, h.CreatePodOn(ctx, ns, "app", m.Name, pvc))
	pod, err := h.WaitPodRunning(ctx, ns, "app", m.Name, 3*time.Minute)
	must(t, err)
	must(t, h.WaitWriter(ctx, pv, m.Name, 3, time.Minute))
	mounts, err := m.CSIMounts()
	must(t, err)
	if !containsSub(mounts, "/pods/"+string(pod.UID)+"/volumes/kubernetes.io~csi/"+pv+"/mount") || !containsSub(mounts, "/plugins/kubernetes.io/csi/"+csi.DriverName+"/") {
		t.Fatalf("%s: CSI mounts %q, want the pod's target and the staging path", m.Name, mounts)
	}
	t.Logf("%s: CSI mounts in the machine's namespace:\n  %s", m.Name, strings.Join(mounts, "\n  "))
	if held {
		must(t, m.HoldMounts())
		t.Cleanup(func() { _ = m.ReleaseMounts() })
	}

	machineLog, kubeletLog := m.Dir+"/machine.log", m.Dir+"/kubelet.log"
	logFrom, kubeletFrom := fileSize(t, machineLog), fileSize(t, kubeletLog)
	oldBoot := m.BootID()
	t0 := time.Now()
	must(t, m.Shutdown(ctx))

	// Watch from outside until the machine is gone: its mounts, its pod.
	var unmounted, killed, gone time.Duration
	since := func() time.Duration { return time.Since(t0).Round(10 * time.Millisecond) }
	for gone == 0 && time.Since(t0) < 2*time.Minute {
		if _, alive := m.BMC.MachinePID(); !alive {
			gone = since()
			break
		}
		if ms, err := m.CSIMounts(); err == nil && len(ms) == 0 && unmounted == 0 {
			unmounted = since()
		}
		if killed == 0 {
			if p, err := h.Cluster.Client().CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{}); err == nil && p.Status.Phase == corev1.PodFailed {
				killed = since()
				if p.Status.Reason != "Terminated" || !strings.Contains(p.Status.Message, "node shutdown") {
					t.Errorf("pod failed with %q: %q, want the kubelet's node shutdown reason", p.Status.Reason, p.Status.Message)
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if gone == 0 {
		t.Fatalf("%s still running 2 minutes after Shutdown", m.Name)
	}
	must(t, m.WaitPower(ctx, "off", 30*time.Second))
	off := since()
	logs := readFile(t, machineLog)[logFrom:]
	kubelet := readFile(t, kubeletLog)[kubeletFrom:]
	// The kubelet log is the evidence: whether the pod's Failed status
	// reaches the API before the machine goes off is a race.
	if !strings.Contains(kubelet, `"Shutdown manager finished killing pod" pod="`+ns+`/app"`) {
		t.Errorf("the kubelet did not kill the pod at shutdown; kubelet.log:\n%s", grep(kubelet, "hutdown"))
	}
	released := strings.Index(logs, "shutdown: all inhibitor locks released")
	expired := strings.Index(logs, "inhibit delay expired with locks held by")
	if !held {
		// The machine's log is the evidence of the order: the plugin
		// logs each unmount once the syscall returned, logind the power
		// off after the last lock. The look from outside every 50 ms is
		// a figure only: the last unmount may come a few milliseconds
		// before the off, a window a loaded machine's look can miss.
		unpublished := strings.Index(logs, "volume unpublished: target unmounted")
		unstaged := strings.Index(logs, "volume unstaged: tmpfs unmounted")
		poweredOff := strings.Index(logs, "shutdown complete: powering off")
		switch {
		case unpublished < 0 || unstaged < 0:
			t.Errorf("the CSI plugin did not unpublish and unstage")
		case poweredOff < 0 || poweredOff < unpublished || poweredOff < unstaged:
			t.Errorf("the CSI mounts were still there when the machine went off")
		case released < 0 || expired >= 0:
			t.Errorf("logind did not see every lock released before the inhibit delay expired")
		case released < unpublished || released < unstaged:
			t.Errorf("the locks were released before the volume was unmounted")
		}
	} else {
		if unmounted != 0 {
			t.Errorf("the CSI mounts went away although they were held")
		}
		if !strings.Contains(logs, "volume unpublish refused: mounts held") {
			t.Errorf("the CSI plugin never refused an unpublish")
		}
		if released >= 0 || !strings.Contains(logs, "inhibit delay expired with locks held by "+volumeGuardArg) {
			t.Errorf("logind did not wait for the volume guard until the inhibit delay expired")
		}
		if delay := DefaultShutdown.InhibitDelayMax; gone < delay {
			t.Errorf("machine gone %s after Shutdown, before the inhibit delay %s", gone, delay)
		}
	}
	if t.Failed() {
		t.Fatalf("machine.log since Shutdown:\n%s", logs)
	}
	t.Logf("%s (mounts held: %v), after Shutdown: pod Failed in the API %s, CSI mounts gone %s, processes gone %s, BMC reads off by %s\n"+
		"machine.log:\n%s\nkubelet.log:\n%s",
		m.Name, held, seenAt(killed), seenAt(unmounted), gone, off, grep(logs, "logind", "volume", "shutdown"), grep(kubelet, "Shutdown manager"))

	// Off until switched on again; then a new boot.
	must(t, h.WaitNodeNotReady(ctx, m.Name, 2*time.Minute))
	must(t, m.ReleaseMounts())
	t1 := time.Now()
	must(t, m.PowerOnViaBMC())
	must(t, m.WaitPower(ctx, "on", 30*time.Second))
	must(t, h.WaitNodeReady(ctx, m.Name, 3*time.Minute))
	n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
	must(t, err)
	if boot := m.BootID(); boot == oldBoot || n.Status.NodeInfo.BootID != boot {
		t.Errorf("boot ID %s (node reports %s), was %s: want a new one", boot, n.Status.NodeInfo.BootID, oldBoot)
	}
	t.Logf("%s: Ready again %s after power on, boot %s", m.Name, time.Since(t1).Round(10*time.Millisecond), m.BootID())
	rep, err := h.CheckVolume(pv)
	must(t, err)
	must(t, rep.Err())
}

// seenAt prints when the look from outside saw something, a zero duration
// being one it never saw (it looks every 50 ms and may miss a short window).
func seenAt(d time.Duration) string {
	if d == 0 {
		return "not seen from outside"
	}
	return d.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// grep returns the lines of s that contain any of subs.
func grep(s string, subs ...string) string {
	var out []string
	for line := range strings.Lines(s) {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				out = append(out, strings.TrimRight(line, "\n"))
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

func containsSub(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
