package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestControlPlane starts the control plane, checks that the API server,
// the controller manager and the scheduler all do their job, stops it, and
// checks that no process is left behind.
func TestControlPlane(t *testing.T) {
	began := time.Now()
	ctx, c := StartForTest(t, Options{})
	t.Logf("Start took %.1fs", time.Since(began).Seconds())
	client := c.Client()

	t.Run("version", func(t *testing.T) { checkVersion(ctx, t, c) })

	const nsName, nodeName = "harness", "node-a"
	if _, err := c.CreateNamespace(ctx, nsName); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, readyNode(nodeName), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node: %v", err)
	}

	t.Run("node identity", func(t *testing.T) { checkNodeIdentity(ctx, t, c, nodeName) })

	// A Deployment needs the deployment controller (→ ReplicaSet), the
	// replicaset controller (→ Pod) and the scheduler (→ spec.nodeName).
	one := int32(1)
	labels := map[string]string{"app": "probe"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: nsName},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
					// The API server taints every new Node not-ready
					// (TaintNodesByCondition) and no kubelet will clear it.
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				},
			},
		},
	}
	if _, err := client.AppsV1().Deployments(nsName).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	var scheduledTo string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rss, err := client.AppsV1().ReplicaSets(nsName).List(ctx, metav1.ListOptions{LabelSelector: "app=probe"})
		if err != nil || len(rss.Items) == 0 {
			return false, err
		}
		pods, err := client.CoreV1().Pods(nsName).List(ctx, metav1.ListOptions{LabelSelector: "app=probe"})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		scheduledTo = pods.Items[0].Spec.NodeName
		return scheduledTo != "", nil
	})
	if err != nil {
		t.Fatalf("deployment → replicaset → scheduled pod did not happen: %v (last nodeName %q)", err, scheduledTo)
	}
	if scheduledTo != nodeName {
		t.Fatalf("pod scheduled to %q, want %q", scheduledTo, nodeName)
	}
	t.Logf("deployment → replicaset → pod scheduled to %s after %.1fs", scheduledTo, time.Since(began).Seconds())

	t.Run("a scheduler that exits is started again", func(t *testing.T) {
		defer func(b time.Duration) { RestartBackoff = b }(RestartBackoff)
		RestartBackoff = 100 * time.Millisecond
		if err := c.signal(Scheduler, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		bare := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "after-restart", Namespace: nsName},
			Spec:       *dep.Spec.Template.Spec.DeepCopy(),
		}
		if _, err := client.CoreV1().Pods(nsName).Create(ctx, bare, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods(nsName).Get(ctx, bare.Name, metav1.GetOptions{})
			return err == nil && p.Spec.NodeName != "" && c.Restarts(Scheduler) == 1, nil
		})
		if err != nil {
			t.Fatalf("no pod scheduled after the scheduler was killed (restarts %d): %v", c.Restarts(Scheduler), err)
		}
	})

	pgids := c.ProcessGroups()
	if len(pgids) != 4 {
		t.Errorf("%d process groups, want 4 (etcd, apiserver, controller-manager, scheduler)", len(pgids))
	}
	stopBegan := time.Now()
	c.Stop()
	t.Logf("Stop took %.1fs", time.Since(stopBegan).Seconds())
	for _, pgid := range pgids {
		if groupAlive(pgid) {
			t.Errorf("process group %d still has processes after Stop", pgid)
		}
	}
	if kids := children(t, os.Getpid()); len(kids) > 0 {
		t.Errorf("child processes left after Stop: %v", kids)
	}
	if _, err := os.Stat(c.Dir); os.Getenv("FENCED_KEEP_CLUSTER") != "1" && !os.IsNotExist(err) {
		t.Errorf("cluster dir %s not removed by Stop (stat: %v)", c.Dir, err)
	}
}

// TestStartFailure checks that a component that cannot start yields an error
// naming it and its log, and that nothing is left running.
func TestStartFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver; skipped with -short")
	}
	ctx := TestContext(t)
	var logs []string
	c, err := Start(ctx, nil, Options{
		APIServerArgs: []string{"--no-such-flag"},
		Logf:          func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) },
	})
	if err == nil {
		c.Stop()
		t.Fatal("Start succeeded with a bogus kube-apiserver flag")
	}
	t.Logf("Start failed as expected: %v", err)
	for _, want := range []string{"kube-apiserver exited before it was ready", c.LogPath(APIServer), "unknown flag: --no-such-flag"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q", want)
		}
	}
	if len(logs) == 0 || !strings.Contains(strings.Join(logs, "\n"), "==== kube-apiserver") {
		t.Errorf("without a testing.TB, Start should print the log tails through Logf; got %q", logs)
	}
	for _, pgid := range c.ProcessGroups() {
		if groupAlive(pgid) {
			t.Errorf("process group %d still alive after a failed Start", pgid)
		}
	}
	// The logs the error points at are kept; the rest is gone.
	if _, err := os.Stat(c.LogPath(APIServer)); err != nil {
		t.Errorf("log named in the error is gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, "etcd")); !os.IsNotExist(err) {
		t.Errorf("etcd data dir not removed after a failed Start (stat: %v)", err)
	}
	os.RemoveAll(c.Dir)
}

// checkVersion checks what kubectl and client-go discovery see: a version
// they can parse, equal to the release the binaries were built for (without
// the build's ldflags it would be v0.0.0-master+$Format:%H$).
func checkVersion(ctx context.Context, t *testing.T, c *Cluster) {
	info, err := c.Client().Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	if info.GitVersion != c.Version {
		t.Errorf("server gitVersion %q, want %q", info.GitVersion, c.Version)
	}
	v, err := utilversion.ParseSemantic(info.GitVersion)
	if err != nil {
		t.Fatalf("server version %q does not parse: %v", info.GitVersion, err)
	}
	if info.Major != strconv.Itoa(int(v.Major())) || info.Minor != strconv.Itoa(int(v.Minor())) {
		t.Errorf("server major/minor %q/%q disagree with %s", info.Major, info.Minor, info.GitVersion)
	}

	// kubectl itself, where installed: its server-version parsing is what
	// users hit first.
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Logf("kubectl not on PATH; discovery checked through client-go only")
		return
	}
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
	var kv struct {
		ServerVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
	}
	if err := json.Unmarshal(out, &kv); err != nil {
		t.Fatalf("kubectl version -o json: %v\n%s", err, out)
	}
	if kv.ServerVersion.GitVersion != c.Version {
		t.Errorf("kubectl sees server %q, want %q", kv.ServerVersion.GitVersion, c.Version)
	}
}

// checkNodeIdentity checks that a client certificate from UserKubeconfig
// works and is subject to the Node authorizer: a node may read its own Node
// but not list Secrets.
func checkNodeIdentity(ctx context.Context, t *testing.T, c *Cluster, node string) {
	nc := nodeClient(t, c, node)
	if _, err := nc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		t.Errorf("node %s cannot read its own Node: %v", node, err)
	}
	if _, err := nc.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node %s listing all Secrets: got %v, want Forbidden", node, err)
	}
}

// readyNode is a Node as a kubelet would register it: capacity for the
// scheduler's resource fit, and a fresh Ready condition.
func readyNode(name string) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now,
			}},
		},
	}
}

// children returns the PIDs of the live processes whose parent is pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses,
		// so split after the last ')'.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			kid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			kids = append(kids, kid)
		}
	}
	return kids
}

// nodeClient is a client of node's identity (system:node:<node>, in
// system:nodes) through a kubeconfig file from UserKubeconfig.
func nodeClient(t *testing.T, c *Cluster, node string) kubernetes.Interface {
	t.Helper()
	path, err := c.UserKubeconfig("system:node:"+node, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	return clientFromKubeconfig(t, path)
}

// clientFromKubeconfig is a client built from the kubeconfig file at path
// alone, as a program given --kubeconfig would build it.
func clientFromKubeconfig(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestBindAddress checks that the API server can be put on another local
// address (as the harness does with its bridge) and that the serving cert and
// kubeconfig follow it. 127.0.0.2 is on lo like 127.0.0.1, so the test needs
// no network setup.
func TestBindAddress(t *testing.T) {
	ctx, c := StartForTest(t, Options{BindAddress: "127.0.0.2", NoScheduler: true})
	if !strings.HasPrefix(c.Host, "https://127.0.0.2:") {
		t.Errorf("Host %q, want it on 127.0.0.2", c.Host)
	}
	kc := clientFromKubeconfig(t, c.Kubeconfig)
	// A verified TLS connection through the kubeconfig file alone.
	if _, err := kc.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("admin kubeconfig against %s: %v", c.Host, err)
	}
	if _, err := Start(ctx, nil, Options{BindAddress: "0.0.0.0"}); err == nil {
		t.Error("Start accepted the wildcard BindAddress 0.0.0.0")
	}
}
