package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/pkg/taint"
)

// TestHarnessOps checks the harness's own fault injections on a real
// harness (1 fencer, 2 workers), so that scenarios can rely on them: an API
// server outage (StopAPIServer, StartAPIServer), an agent restarted in
// place (RestartAgent) and an agent frozen alone (FreezeAgent, ThawAgent).
func TestHarnessOps(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2"},
		Fencing:  &harness.Fencing{Fencers: []string{"cp-1"}},
	})
	fencer := h.Machine("cp-1")

	t.Run("API server down: everyone refused; back up: same clients work, the fencer reconnects, nodes stay Ready", func(t *testing.T) {
		fencerPID, err := fencer.AgentPID()
		must(t, err)
		if n := apiConnections(t, h, fencerPID); n == 0 {
			t.Fatalf("the fencer agent (pid %d) has no connection to the API server %s before the outage", fencerPID, h.Cluster.Host)
		}
		fencerLog := len(fencer.AgentLog())
		kubeletLogs := map[string]int{}
		for _, m := range h.Machines {
			kubeletLogs[m.Name] = len(m.KubeletLog())
		}
		// Whatever happens below, the later subtests need the API.
		t.Cleanup(func() {
			if h.Cluster.APIServerDown() {
				if err := h.Cluster.StartAPIServer(ctx); err != nil {
					t.Errorf("starting the API server again at cleanup: %v", err)
				}
			}
		})
		t0 := time.Now()
		h.Cluster.StopAPIServer()
		t.Logf("API server stopped in %.1fs", time.Since(t0).Seconds())
		if _, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{}); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("Node Get while the API server is down: %v, want connection refused", err)
		}
		// The kubelets renew their Lease every 10 s, from their machines'
		// namespaces: each is refused.
		for _, m := range h.Machines {
			line := waitLine(t, m.Name+"'s kubelet", m.KubeletLog, kubeletLogs[m.Name], 30*time.Second, "connection refused")
			t.Logf("%.1fs: %s's kubelet: %s", time.Since(t0).Seconds(), m.Name, line)
		}
		// An idle fencer makes no request (watches only), and client-go
		// retries a refused watch without a word (klog V(4)), so its log
		// stays quiet; but its connections to the API server are gone.
		if n := apiConnections(t, h, fencerPID); n != 0 {
			t.Errorf("the fencer agent has %d connections to the API server while it is down", n)
		}

		if during := fencer.AgentLog()[fencerLog:]; strings.Contains(during, "refused") {
			t.Logf("the fencer's log during the outage:\n%s", during)
		} else {
			t.Logf("the fencer logged %d lines during the outage, none about it", strings.Count(during, "\n"))
		}

		t1 := time.Now()
		must(t, h.Cluster.StartAPIServer(ctx))
		t.Logf("API server started again in %.1fs (down %.1fs in all)", time.Since(t1).Seconds(), time.Since(t0).Seconds())
		for _, m := range h.Machines {
			n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
			must(t, err)
			if harness.NodeReady(n) != corev1.ConditionTrue {
				t.Errorf("node %s is %s right after the outage, want Ready", m.Name, harness.NodeReady(n))
			}
		}
		// The fencer's informers come back by themselves (client-go's
		// watch back-off is at most 30 s).
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			return apiConnections(t, h, fencerPID) > 0, nil
		})
		if err != nil {
			t.Fatalf("the fencer agent did not reconnect to the API server: %v", err)
		}
		t.Logf("the fencer agent is connected again %.1fs after StartAPIServer began", time.Since(t1).Seconds())
		// The controller manager and the kubelets catch up: the nodes stay
		// Ready (the outage was well within the 50 s grace period) and no
		// one is tainted.
		requireStableFor(ctx, t, h, 15*time.Second)
		if pid, err := fencer.AgentPID(); err != nil || pid != fencerPID {
			t.Errorf("fencer agent pid %d (%v) after the outage, want %d: it must ride it out", pid, err, fencerPID)
		}
	})

	t.Run("agent restarted in place: same boot ID, started twice, back in the ring", func(t *testing.T) {
		m := h.Machine("w-1")
		boot := m.BootID()
		oldPID, err := m.AgentPID()
		must(t, err)
		starts := strings.Count(m.AgentLog(), `msg="agent started"`)
		fencerLog := len(fencer.AgentLog())
		t0 := time.Now()
		must(t, m.RestartAgent())
		newPID, err := m.AgentPID()
		must(t, err)
		if newPID == oldPID {
			t.Fatalf("agent pid %d unchanged by RestartAgent", newPID)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return strings.Count(m.AgentLog(), `msg="agent started"`) > starts, nil
		})
		must(t, err)
		restarted := time.Since(t0)
		lines := grepLines(m.AgentLog(), `msg="agent started"`)
		if len(lines) != starts+1 || !strings.Contains(lines[len(lines)-1], "boot="+boot) {
			t.Fatalf("\"agent started\" lines after the restart (boot %s):\n%s", boot, strings.Join(lines, "\n"))
		}
		if got := m.BootID(); got != boot {
			t.Errorf("boot ID %s after an agent restart, want %s (the host did not reboot)", got, boot)
		}
		if !strings.Contains(m.AgentLog(), "==== restart in boot "+boot) {
			t.Errorf("the agent's log lacks the launcher's restart marker")
		}
		// Back in the ring: the new agent sees everyone, and the fencer
		// hears its announcement (signed with the new agent's key: new
		// metadata) for the same boot.
		waitMetric(t, m, fmt.Sprintf(`fenced_members{state="alive"} %d`, len(h.Machines)), time.Minute)
		heard := waitLine(t, "the fencer", fencer.AgentLog, fencerLog, time.Minute, "gossip member", "node="+m.Name+" ", "to=alive", "bootID="+boot)
		waitMetric(t, fencer, fmt.Sprintf(`fenced_members{state="alive"} %d`, len(h.Machines)), time.Minute)
		t.Logf("agent %s restarted (pid %d → %d), said \"agent started\" %.1fs after RestartAgent; the fencer logged after %.1fs: %s",
			m.Name, oldPID, newPID, restarted.Seconds(), time.Since(t0).Seconds(), heard)
		requireStableFor(ctx, t, h, 5*time.Second)
	})

	t.Run("fencer agent frozen alone: state T, /metrics silent; thawed: answers again", func(t *testing.T) {
		pid, err := fencer.AgentPID()
		must(t, err)
		must(t, fencer.FreezeAgent())
		t.Cleanup(func() { _ = fencer.ThawAgent() })
		if s := procState(t, pid); s != "T" {
			t.Fatalf("frozen agent %d is in state %s, want T", pid, s)
		}
		if _, err := fencer.Metrics(); err == nil {
			t.Error("a frozen agent served /metrics")
		}
		if s := procState(t, pid); s != "T" { // still, after a request it could not answer
			t.Fatalf("frozen agent %d is in state %s, want T", pid, s)
		}
		// The rest of the machine runs on: its Node stays Ready.
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, fencer.Name, metav1.GetOptions{})
		must(t, err)
		if harness.NodeReady(n) != corev1.ConditionTrue {
			t.Errorf("node %s is %s while only its agent is frozen", fencer.Name, harness.NodeReady(n))
		}
		must(t, fencer.ThawAgent())
		if s := procState(t, pid); s == "T" {
			t.Fatalf("thawed agent %d still stopped", pid)
		}
		waitMetric(t, fencer, fmt.Sprintf(`fenced_members{state="alive"} %d`, len(h.Machines)), time.Minute)
		if now, err := fencer.AgentPID(); err != nil || now != pid {
			t.Errorf("agent pid %d (%v) after the thaw, want %d", now, err, pid)
		}
	})
}

// waitLine waits until text(), from byte offset from on, has a line
// containing each of what, and returns that line. name says whose text it
// is.
func waitLine(t *testing.T, name string, text func() string, from int, timeout time.Duration, what ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := text()
		if from <= len(s) {
			if lines := grepLines(s[from:], what...); len(lines) > 0 {
				return lines[0]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s logged no line with %q within %s; its log ends:\n%s", name, what, timeout, cluster.LastLines(s, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitMetric waits until the machine's agent serves a /metrics line equal
// to want.
func waitMetric(t *testing.T, m *harness.Machine, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		text, err := m.Metrics()
		if err == nil && strings.Contains(text, want+"\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's agent does not serve %q after %s (last error %v); members: %s",
				m.Name, want, timeout, err, strings.Join(grepLines(text, "fenced_members{"), "; "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// requireStableFor fails the test if, at any time during d, a machine's
// Node is not Ready or carries fenced's out-of-service taint.
func requireStableFor(ctx context.Context, t *testing.T, h *harness.Harness, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		for _, m := range h.Machines {
			n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Node %s: %v", m.Name, err)
			}
			if harness.NodeReady(n) != corev1.ConditionTrue {
				t.Fatalf("node %s became %s", m.Name, harness.NodeReady(n))
			}
			for _, tn := range n.Spec.Taints {
				if tn.Key == taint.TaintKey {
					t.Fatalf("node %s was tainted: %v", m.Name, tn)
				}
			}
		}
	}
}

// apiConnections counts the established TCP connections from process pid
// to the API server. /proc/<pid>/net/tcp lists every socket of the
// process's network namespace (the kubelet's too), so only the sockets
// among pid's own file descriptors count.
func apiConnections(t *testing.T, h *harness.Harness, pid int) int {
	t.Helper()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(h.Cluster.Host, "https://"))
	must(t, err)
	ip := net.ParseIP(host).To4()
	p, err := strconv.Atoi(port)
	must(t, err)
	if ip == nil {
		t.Fatalf("API server address %s is not IPv4", host)
	}
	// The kernel prints an IPv4 address as its 32 bits in host (little
	// endian) order, the port in plain hex.
	remote := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], p)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	must(t, err)
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	table, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	must(t, err)
	n := 0
	for _, line := range strings.Split(string(table), "\n")[1:] {
		// sl local remote st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) >= 10 && f[2] == remote && f[3] == "01" && inodes[f[9]] {
			n++
		}
	}
	return n
}

// procState returns the state letter of process pid (R, S, T, ...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	must(t, err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) == 0 {
		t.Fatalf("cannot parse /proc/%d/stat: %q", pid, s)
	}
	return f[0]
}

// grepLines returns the lines of text that contain each of what.
func grepLines(text string, what ...string) []string {
	var out []string
lines:
	for _, l := range strings.Split(text, "\n") {
		for _, w := range what {
			if !strings.Contains(l, w) {
				continue lines
			}
		}
		out = append(out, l)
	}
	return out
}
