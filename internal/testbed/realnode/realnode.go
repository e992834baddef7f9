// Package realnode runs one real node beside the harness's hollow ones: the
// upstream kubelet (built by hack/kube-binaries.sh at the harness's
// Kubernetes version) on Debian's containerd and runc, in a network
// namespace on the harness's bridge. It is what shows that fenced's
// DaemonSet — hostNetwork, the /run/dbus and /var/lib/kubelet mounts, a
// read-only root, a non-root user, seccomp, probes — works as pods, where
// the hollow kubelets only pretend to run them.
//
// The node is as real as this machine allows, and differs from a server in
// these ways, each for a reason:
//   - containerd and the kubelet run in the root mount namespace and only
//     enter the node's network namespace (nsenter --net, not ip netns
//     exec, which remounts /sys and so hides the cgroup hierarchies the
//     kubelet needs). So the kubelet's root is the host's /var/lib/kubelet
//     and its pods' logs go to /var/log/pods, as on a node; one real node
//     per machine at a time (a lock file serialises them).
//   - Pods with their own network get only a loopback (the CNI loopback
//     plugin): fenced runs with hostNetwork, and no test pod needs more.
//     kube-proxy runs (iptables mode, in the node's namespace), so that
//     in-cluster clients reach the API server at the kubernetes Service.
//   - The sandbox image is the pause program of ./pause, built here and
//     imported, since nothing may be pulled from a registry.
//   - cgroup v1 with the cgroupfs driver: what this machine kind has.
//   - Without CAP_SYS_RESOURCE (this machine kind's sandboxes drop it) no
//     process may get a negative oom_score_adj, which the kubelet asks for
//     sandboxes and critical pods; containerd then clamps the scores
//     (canLowerOOMScore).
//
// With Options.Logind it also serves the test logind (package logind) on
// the host's system bus socket, /run/dbus/system_bus_socket, which the
// DaemonSet mounts: the node has a logind to talk to, as a systemd host does.
package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/logind"
	"fenced.io/fenced/internal/testbed/netns"
)

// Where the node keeps its state on the host, as a kubelet does.
const (
	// KubeletRootDir is the kubelet's --root-dir: the DaemonSet mounts it.
	KubeletRootDir = "/var/lib/kubelet"
	// PodLogDir is where the kubelet writes its containers' logs.
	PodLogDir = "/var/log/pods"
	// containerLogLinks is where it links them by container name.
	containerLogLinks = "/var/log/containers"
	// SystemBusDir holds the system bus socket the DaemonSet mounts.
	SystemBusDir = "/run/dbus"
	// lockFile serialises real nodes on one machine.
	lockFile = "/run/lock/fenced-realnode.lock"
	// cniBinDir is where Debian's containernetworking-plugins installs.
	cniBinDir = "/usr/lib/cni"
	// PauseImage is the sandbox image's name in containerd.
	PauseImage = "fenced.test/pause:1"
)

// Options configure Start.
type Options struct {
	// Name is the node's name (default "real-1").
	Name string
	// Labels are set by the kubelet on its Node (--node-labels).
	Labels map[string]string
	// Images are image archives (OCI layout or docker save tar files)
	// imported into containerd's k8s.io namespace before the kubelet
	// starts: the node has no registry.
	Images []string
	// Logind serves the test logind on SystemBusDir/system_bus_socket for
	// the node's kubelet and agents. Start fails if a system bus is
	// already listening there.
	Logind bool
}

// Node is a running real node.
type Node struct {
	Name string
	Host *netns.Host
	// Dir holds the node's configuration, containerd's state and the logs.
	Dir string
	// Logind is the node's logind (Options.Logind), else nil.
	Logind *logind.Logind

	h          *harness.Harness
	socket     string // containerd's
	containerd *exec.Cmd
	kubelet    *exec.Cmd
	kubeProxy  *exec.Cmd
}

// Start brings up a real node on h's network and waits until its Node is
// Ready. Everything it started or created on the host is stopped and
// removed at t's cleanup, containers first.
func Start(ctx context.Context, t testing.TB, h *harness.Harness, o Options) *Node {
	t.Helper()
	if o.Name == "" {
		o.Name = "real-1"
	}
	if err := Available(); err != nil {
		t.Fatalf("realnode: %v", err)
	}
	unlock, err := lockMachine(ctx, t)
	if err != nil {
		t.Fatalf("realnode: %v", err)
	}
	t.Cleanup(unlock)
	host, err := h.Net.AddHost(o.Name)
	if err != nil {
		t.Fatalf("realnode: %v", err)
	}
	n := &Node{Name: o.Name, Host: host, Dir: filepath.Join(h.Dir, o.Name), h: h}
	n.socket = filepath.Join(n.Dir, "containerd.sock")
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			n.dumpLogs(t)
		}
		n.stop(t)
	})
	start := time.Now()
	if o.Logind {
		if n.Logind, err = startLogind(ctx, n.Dir); err != nil {
			t.Fatalf("realnode: %v", err)
		}
	}
	if err := n.startContainerd(ctx); err != nil {
		t.Fatalf("realnode: %v", err)
	}
	t.Logf("realnode: containerd up after %s", time.Since(start).Round(time.Millisecond))
	pause, err := buildPauseImage(n.Dir)
	if err != nil {
		t.Fatalf("realnode: %v", err)
	}
	for _, img := range append([]string{pause}, o.Images...) {
		if out, err := n.ctr(ctx, "images", "import", img); err != nil {
			t.Fatalf("realnode: importing %s: %v\n%s", img, err, out)
		}
	}
	t.Logf("realnode: %d images imported after %s", 1+len(o.Images), time.Since(start).Round(time.Millisecond))
	if err := n.startKubeProxy(ctx); err != nil {
		t.Fatalf("realnode: %v", err)
	}
	if err := n.startKubelet(o); err != nil {
		t.Fatalf("realnode: %v", err)
	}
	if err := h.WaitNodeReady(ctx, n.Name, 3*time.Minute); err != nil {
		t.Fatalf("realnode: %v\nkubelet log:\n%s", err, cluster.TailFile(n.logPath("kubelet"), 40))
	}
	t.Logf("realnode: %s Ready after %s (kubelet %s, containerd and runc from Debian)", n.Name, time.Since(start).Round(time.Millisecond), h.Cluster.Version)
	return n
}

// Available says what is missing for a real node on this machine: the
// runtime (make deps installs containerd, runc and the CNI plugins), the
// kubelet (make kube-binaries), cgroups.
func Available() error {
	var missing []string
	for _, cmd := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, cmd)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "loopback")); err != nil {
		missing = append(missing, cniBinDir+"/loopback")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s not installed: make deps installs containerd, runc and containernetworking-plugins", strings.Join(missing, ", "))
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		return fmt.Errorf("no cgroup file system: %w", err)
	}
	return nil
}

// lockMachine takes the machine-wide lock of real nodes: they share
// /var/lib/kubelet, /run/dbus and the kubepods cgroups.
func lockMachine(ctx context.Context, t testing.TB) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(lockFile), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for waited := false; ; waited = true {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		if !waited {
			t.Logf("realnode: another real node runs on this machine; waiting for %s", lockFile)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func startLogind(ctx context.Context, dir string) (*logind.Logind, error) {
	socket := filepath.Join(SystemBusDir, logind.SocketName)
	if _, err := os.Stat(socket); err == nil {
		return nil, fmt.Errorf("%s exists: this machine runs a system bus; leave Options.Logind off", socket)
	}
	logFile, err := os.Create(filepath.Join(dir, "logind.log"))
	if err != nil {
		return nil, err
	}
	l, err := logind.Start(ctx, logind.Options{Dir: SystemBusDir, Logger: slog.New(slog.NewTextHandler(logFile, nil))})
	if err != nil {
		logFile.Close()
		return nil, err
	}
	// The socket lets anyone connect, as the system bus's does (the bus
	// policy then decides).
	if err := os.Chmod(socket, 0o666); err != nil {
		l.Stop()
		return nil, err
	}
	return l, nil
}

// startContainerd writes containerd's configuration — state under Dir, the
// CRI plugin with runc, cgroupfs, our pause image and a loopback-only CNI
// network — and starts it in the node's network namespace.
func (n *Node) startContainerd(ctx context.Context) error {
	cniConf := filepath.Join(n.Dir, "cni")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cniConf, "10-loopback.conflist"),
		[]byte(`{"cniVersion": "1.0.0", "name": "loopback", "plugins": [{"type": "loopback"}]}`+"\n"), 0o644); err != nil {
		return err
	}
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = %[7]t
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
`, filepath.Join(n.Dir, "containerd", "root"), filepath.Join(n.Dir, "containerd", "state"), n.socket, PauseImage, cniBinDir, cniConf,
		!canLowerOOMScore())
	configFile := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return err
	}
	var err error
	if n.containerd, err = n.startInNetns("containerd", "containerd", "--config", configFile); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := n.ctr(ctx, "version"); err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("containerd did not answer within 30s; its log:\n%s", cluster.TailFile(n.logPath("containerd"), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// canLowerOOMScore reports whether this process may give a process a
// negative oom_score_adj, which needs CAP_SYS_RESOURCE. The kubelet asks
// for -998 for every pod sandbox and -997 for critical pods (fenced's
// DaemonSets are system-node-critical); where the capability is missing —
// this project's microVM sandboxes drop it — runc fails with "can't get
// final child's PID from pipe: EOF" and no pod starts. containerd's
// restrict_oom_score_adj (meant for rootless runtimes) then clamps the
// scores at containerd's own.
func canLowerOOMScore() bool {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	const capSysResource = 24
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && caps&(1<<capSysResource) != 0
		}
	}
	return false
}

// startKubelet configures the kubelet as a node of the harness — a client
// certificate of system:node:<name>, cgroupfs, cgroup v1 allowed (this
// machine kind has it; since Kubernetes v1.35 the kubelet refuses to start
// on it unless failCgroupV1 is false), no swap check, eviction
// thresholds that a test machine's disk does not trip, graceful shutdown
// through logind when the node has one — and starts it.
func (n *Node) startKubelet(o Options) error {
	if entries, err := os.ReadDir(filepath.Join(KubeletRootDir, "pods")); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s/pods is not empty: another kubelet runs, or ran, on this machine", KubeletRootDir)
	}
	kubeconfig, err := n.h.Cluster.UserKubeconfig("system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	resolv := filepath.Join(n.Dir, "resolv.conf")
	// Nothing answers there: no DNS lookup leaves the machine.
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		return err
	}
	shutdown := ""
	if o.Logind {
		shutdown = "shutdownGracePeriod: 15s\nshutdownGracePeriodCriticalPods: 5s\n"
	}
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
resolvConf: %s
localStorageCapacityIsolation: false
evictionHard: {memory.available: 10Mi, nodefs.available: 1%%, imagefs.available: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
%s`, n.socket, n.Host.Addr, resolv, shutdown)
	configFile := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return err
	}
	binDir, err := cluster.BinDir(cluster.KubeVersion())
	if err != nil {
		return err
	}
	args := []string{filepath.Join(binDir, "kubelet"),
		"--config=" + configFile,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + KubeletRootDir,
		"--cert-dir=" + filepath.Join(n.Dir, "pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.Host.Addr.String(),
		"--v=2",
	}
	if len(o.Labels) > 0 {
		var labels []string
		for k, v := range o.Labels {
			labels = append(labels, k+"="+v)
		}
		slices.Sort(labels)
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	n.kubelet, err = n.startInNetns("kubelet", args...)
	return err
}

// startKubeProxy runs kube-proxy (iptables mode) in the node's network
// namespace, so that pods reach the API server at the kubernetes Service's
// address, as in-cluster clients do. The harness's API server runs without
// its endpoint reconciler (it may listen on loopback), so the Service's
// EndpointSlice is written here, as the reconciler would: the API server's
// address on the bridge.
func (n *Node) startKubeProxy(ctx context.Context) error {
	if err := n.publishAPIServerEndpoint(ctx); err != nil {
		return err
	}
	kubeconfig, err := n.h.Cluster.UserKubeconfig("system:kube-proxy") // bound to system:node-proxier by default
	if err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: %s
bindAddress: %s
clientConnection: {kubeconfig: %s}
# Leave the host's conntrack table alone (0: as it is).
conntrack: {maxPerCore: 0, min: 0}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`, n.Name, n.Host.Addr, kubeconfig)
	configFile := filepath.Join(n.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return err
	}
	binDir, err := cluster.BinDir(cluster.KubeVersion())
	if err != nil {
		return err
	}
	n.kubeProxy, err = n.startInNetns("kube-proxy", filepath.Join(binDir, "kube-proxy"), "--config="+configFile, "--v=2")
	return err
}

// publishAPIServerEndpoint writes the EndpointSlice of the default
// namespace's kubernetes Service: the API server's address and port.
func (n *Node) publishAPIServerEndpoint(ctx context.Context) error {
	u, err := url.Parse(n.h.Cluster.RESTConfig().Host)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return fmt.Errorf("API server URL %s: %w", u, err)
	}
	name, protocol, ready := "https", corev1.ProtocolTCP, true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "realnode.fenced.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{u.Hostname()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &protocol, Port: ptr(int32(port))}},
	}
	_, err = n.h.Cluster.Client().DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, slice, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func ptr[T any](v T) *T { return &v }

// startInNetns starts argv in the node's network namespace only (see the
// package comment), in a process group of its own, logging to
// logPath(component).
func (n *Node) startInNetns(component string, argv ...string) (*exec.Cmd, error) {
	log, err := os.Create(n.logPath(component))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := n.Host.NetCommand(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", component, err)
	}
	return cmd, nil
}

// ctr runs containerd's ctr against the node's containerd, in the
// namespace the CRI plugin uses.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.socket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

// logPath is where the node's component (containerd, kubelet,
// kube-proxy) logs.
func (n *Node) logPath(component string) string { return filepath.Join(n.Dir, component+".log") }

// ContainerLog returns the log the kubelet keeps of a container of a pod
// (the newest attempt): what kubectl logs would show.
func (n *Node) ContainerLog(pod *corev1.Pod, container string) (string, error) {
	dir := filepath.Join(PodLogDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), container)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	if len(entries) == 0 {
		return "", fmt.Errorf("%s: no log yet", dir)
	}
	// The kubelet's CRI log format: time, stream, tag, then the line.
	var b strings.Builder
	f, err := os.Open(filepath.Join(dir, entries[len(entries)-1].Name()))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.SplitN(sc.Text(), " ", 4); len(f) == 4 {
			b.WriteString(f[3] + "\n")
		}
	}
	return b.String(), sc.Err()
}

// stop tears the node down: the kubelet, every container, containerd and
// its shims; then the mounts, cgroups and directories they left on the
// host; then the Node object, so the harness's controllers forget it.
func (n *Node) stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	terminate(n.kubelet, 20*time.Second)
	terminate(n.kubeProxy, 20*time.Second)
	if n.containerd != nil {
		if out, err := n.ctr(ctx, "tasks", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				_, _ = n.ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id)
				_, _ = n.ctr(ctx, "tasks", "delete", "-f", id)
			}
		}
		if out, err := n.ctr(ctx, "containers", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				_, _ = n.ctr(ctx, "containers", "delete", id)
			}
		}
	}
	terminate(n.containerd, 20*time.Second)
	killShims(n.socket)
	if n.Logind != nil {
		n.Logind.Stop()
		for _, f := range []string{logind.SocketName, "system.conf", "dbus-daemon.log"} {
			_ = os.Remove(filepath.Join(SystemBusDir, f))
		}
	}
	for _, dir := range []string{KubeletRootDir, n.Dir} {
		if err := unmountBelow(dir); err != nil {
			t.Logf("realnode: %v", err)
		}
	}
	removeCgroups("kubepods")
	for _, dir := range []string{KubeletRootDir, PodLogDir, containerLogLinks} {
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("realnode: %v", err)
		}
	}
	if err := n.h.Cluster.Client().CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
		t.Logf("realnode: deleting Node %s: %v", n.Name, err)
	}
}

// terminate stops cmd's process group: SIGTERM, then SIGKILL after grace.
func terminate(cmd *exec.Cmd, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
}

// killShims kills the containerd shims of the containerd at socket: they
// outlive containerd by design (containers survive its restarts).
func killShims(socket string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "containerd-shim-runc-v2" && slices.Contains(args, socket) {
			var pid int
			if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// unmountBelow unmounts every mount point below dir (the kubelet's volume
// mounts, containerd's overlays and shm), deepest first.
func unmountBelow(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroups removes the cgroup tree name the kubelet made in every
// cgroup v1 hierarchy (and in the v2 one), deepest first.
func removeCgroups(name string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	if _, err := os.Stat("/sys/fs/cgroup/" + name); err == nil {
		roots = append(roots, "/sys/fs/cgroup/"+name)
	}
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			_ = os.Remove(d)
		}
	}
}

func (n *Node) dumpLogs(t testing.TB) {
	t.Helper()
	for _, l := range []struct {
		name  string
		lines int
	}{{"kubelet", 60}, {"containerd", 30}, {"kube-proxy", 20}} {
		t.Logf("realnode: %s log (tail):\n%s", l.name, cluster.TailFile(n.logPath(l.name), l.lines))
	}
}
