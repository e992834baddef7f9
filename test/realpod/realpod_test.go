// Package realpod runs fenced as Kubernetes runs it: the image of make
// image, the Helm chart, on a real kubelet with a real container runtime
// (internal/testbed/realnode), beside the harness's hollow machines, whose
// agents are processes. It is the proof that the DaemonSet's pieces —
// hostNetwork, the /run/dbus and /var/lib/kubelet mounts with
// HostToContainer propagation, a read-only root, no capabilities, seccomp,
// the probes — work together, and that an agent in a pod is a member of
// the same ring as the others and a fencer in a pod fences.
package realpod

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/realnode"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.Cleanup()
	os.Exit(code)
}

const (
	// imageTag is what the chart's values name; the kubelet asks
	// containerd for docker.io/library/fenced:realpod, the name the
	// archive carries (hack/image).
	imageRepository = "fenced"
	imageTag        = "realpod"
	// fenceAgentsImageRepository is the fencers' image, with the
	// ClusterLabs fence agents (make image-fence-agents):
	// docker.io/library/fenced-fence-agents:realpod.
	fenceAgentsImageRepository = "fenced-fence-agents"
	// systemdLabel keeps the chart's agents off the hollow machines, as
	// the README has hosts that run the agent outside the DaemonSets
	// labelled: their kubelets would only pretend to run the pods, and
	// they run their agents as processes already.
	systemdLabel = "fenced.io/agent"
	// fencerLabel is the chart's fencer node selector: a label a kubelet
	// cannot set on its own Node (NodeRestriction), so the test sets it.
	fencerLabel = "node-restriction.kubernetes.io/fenced-fencer"
	// Generous: a loaded CI machine.
	podReadyTimeout = 3 * time.Minute
	fenceTimeout    = 2 * time.Minute
)

// TestAgentsAsPods installs the chart with the values README.md's install
// shows — changed only where the README says to change them: the image, and
// the inventory (here the hollow machines' BMCs) — on a cluster of three
// hollow machines (agents as processes, observers, in the ring the README's
// values configure) and one real node, and shows:
//  1. the observer pod Running and Ready on the real node — its /readyz
//     answered through the kubelet's probe — without any capability, on a
//     read-only root, under the runtime's default seccomp profile;
//  2. it is a member of the ring: it sees the hollow machines' agents
//     alive, and they see it;
//  3. it holds its logind shutdown delay lock through the mounted
//     /run/dbus, beside the real kubelet's;
//  4. its metrics answer on the node's address;
//  5. then, that node labelled a fencer node: the fencer pod takes over
//     and joins the same ring, in dry-run as installed; gone live as the
//     README says (dryRun false, helm upgrade), when a hollow machine loses
//     power it reads the machine's BMC and taints it out-of-service, with
//     the evidence on the Node.
func TestAgentsAsPods(t *testing.T) {
	if testing.Short() {
		t.Skip(harness.SkipShortMessage)
	}
	helm, kubectl := tools(t)
	values, ring := readmeValues(t, helm)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"node-a", "node-b", "node-c"},
		Fencing:  &harness.Fencing{ClusterName: ring.ClusterName, GossipPort: ring.Gossip.Port},
	})
	node := startRealNode(ctx, t, h)
	fencers := prepareReadmeInstall(ctx, t, h, values)
	install(t, helm, kubectl, h, values)

	// 1. Running and Ready through the kubelet's readiness probe.
	pod := waitPodReady(ctx, t, h, "observer", node)
	t.Logf("observer pod %s Ready on %s %s after it was created", pod.Name, node.Name,
		readySince(pod).Sub(pod.CreationTimestamp.Time).Round(time.Second))
	requireHardened(t, pod)
	requireUnprivileged(t, node, pod)

	// 2. In the ring with the hollow machines' agents, both ways.
	members := len(h.Machines) + 1
	alive := fmt.Sprintf(`fenced_members{state="alive"} %d`, members)
	waitMetrics(ctx, t, "the pod's own view", func() (string, error) { return harness.Scrape(node.Host.Addr) }, alive)
	for _, m := range h.Machines {
		waitMetrics(ctx, t, m.Name+"'s agent", m.Metrics, alive)
	}
	t.Logf("ring: the pod and the %d hollow machines' agents each see %d members alive", len(h.Machines), members)

	// 3. logind through the mounted /run/dbus: the agent's delay lock,
	// beside the kubelet's (graceful node shutdown).
	waitInhibitors(ctx, t, node)
	logs, err := node.ContainerLog(pod, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"holding a logind shutdown delay lock", "the kubelet has graceful node shutdown"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the agent's log (from the kubelet's log file) lacks %q:\n%s", want, logs)
		}
	}

	// 4. Metrics, as a Prometheus scrape of the node's address would get
	// them (the chart's headless Service selects the same port).
	text, err := harness.Scrape(node.Host.Addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fenced_members", "fenced_kubelet_graceful_shutdown", "process_resident_memory_bytes"} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics of the pod lack %s", want)
		}
	}

	// 5. The fencer as a pod: the real node labelled a fencer node, as
	// the README labels cp-1; the DaemonSets swap the observer for the
	// fencer, in the same ring, in dry-run.
	setLabel(ctx, t, h, node.Name, fencerLabel, "true")
	fencer := waitPodReady(ctx, t, h, "fencer", node)
	t.Logf("fencer pod %s Ready on %s", fencer.Name, node.Name)
	waitMetrics(ctx, t, "the fencer pod", func() (string, error) { return harness.Scrape(node.Host.Addr) }, alive)
	waitMetrics(ctx, t, "the fencer pod", func() (string, error) { return harness.Scrape(node.Host.Addr) }, "fenced_dry_run 1")

	// Go live as the README says: dryRun false, helm upgrade.
	goLive(fencers)
	install(t, helm, kubectl, h, values)
	rolled, err := h.WaitPodOn(ctx, harness.LeaseNamespace, "app.kubernetes.io/component=fencer", node.Name, fencer.Name, podReadyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WaitPodReady(ctx, harness.LeaseNamespace, rolled.Name, node.Name, podReadyTimeout); err != nil {
		t.Fatal(err)
	}
	waitMetrics(ctx, t, "the live fencer pod", func() (string, error) { return harness.Scrape(node.Host.Addr) }, "fenced_dry_run 0")
	waitMetrics(ctx, t, "the live fencer pod", func() (string, error) { return harness.Scrape(node.Host.Addr) }, alive)
	t.Logf("gone live: fencer pod %s Ready on %s", rolled.Name, node.Name)

	victim := h.Machine("node-c")
	lost := time.Now()
	if err := victim.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	ev := waitTainted(ctx, t, h, victim.Name)
	t.Logf("%s lost power; tainted %s later by %q on %s evidence (BMC read %s at %s)", victim.Name,
		time.Since(lost).Round(100*time.Millisecond), ev.By, ev.Method, ev.BMC.Power, ev.At.Format(time.RFC3339Nano))
	if ev.Method != vocab.EvidenceBMCPowerOff || !strings.Contains(ev.By, node.Name) {
		t.Fatalf("evidence %+v: want %s by the fencer on %s", ev, vocab.EvidenceBMCPowerOff, node.Name)
	}
}

// buildImage runs make image into a temporary archive.
func buildImage(t *testing.T) string {
	t.Helper()
	return makeImage(t, "image", "IMAGE_ARCHIVE", "IMAGE_TAG", imageRepository+":"+imageTag)
}

// buildFenceAgentsImage runs make image-fence-agents into a temporary
// archive.
func buildFenceAgentsImage(t *testing.T) string {
	t.Helper()
	return makeImage(t, "image-fence-agents", "FENCE_AGENTS_IMAGE_ARCHIVE", "FENCE_AGENTS_IMAGE_TAG", fenceAgentsImageRepository+":"+imageTag)
}

// makeImage runs the image target for this machine's platform only into a
// temporary archive (the variable archiveVar), the image named tag (the
// variable tagVar).
func makeImage(t *testing.T, target, archiveVar, tagVar, tag string) string {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "image.tar")
	// Its own binary path: test/deploy's TestImage may build at the same time.
	cluster.MakeImage(t, target, archiveVar+"="+out, "IMAGE_BINARY="+filepath.Join(dir, "fenced"),
		tagVar+"="+tag, "IMAGE_PLATFORMS=linux/"+runtime.GOARCH)
	return out
}

// tools returns the pinned helm and the harness's kubectl.
func tools(t *testing.T) (helm, kubectl string) {
	t.Helper()
	helm, err := cluster.InstallTool(cluster.HelmModule)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := cluster.BinDir(cluster.KubeVersion())
	if err != nil {
		t.Fatal(err)
	}
	return helm, filepath.Join(dir, "kubectl")
}

// render renders the chart with values, as `helm template` does.
func render(helm string, values map[string]any) ([]byte, error) {
	chart, err := cluster.RepoFile("deploy/helm/fenced")
	if err != nil {
		return nil, err
	}
	raw, err := yaml.Marshal(values)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "realpod-values-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	valuesFile := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(valuesFile, raw, 0o644); err != nil {
		return nil, err
	}
	out, err := exec.Command(helm, "template", "fenced", chart, "--namespace", harness.LeaseNamespace,
		"--kube-version", cluster.KubeVersion(), "--values", valuesFile).Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %v\n%s", err, stderrOf(err))
	}
	return out, nil
}

// observerConfig is the observers' configuration the chart makes of values.
func observerConfig(helm string, values map[string]any) (*config.Config, error) {
	out, err := render(helm, values)
	if err != nil {
		return nil, err
	}
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil || cm.Kind != "ConfigMap" || cm.Name != "fenced-observer-config" {
			continue
		}
		return config.Parse([]byte(cm.Data["config.yaml"]), "ConfigMap "+cm.Name)
	}
	return nil, fmt.Errorf("the chart renders no ConfigMap fenced-observer-config")
}

// install renders the chart with values and applies it, as
// `helm template | kubectl apply` does. Server-side and forced: the
// harness installed the same agent-identity policy from the same file.
func install(t *testing.T, helm, kubectl string, h *harness.Harness, values map[string]any) {
	t.Helper()
	out, err := render(helm, values)
	if err != nil {
		t.Fatal(err)
	}
	apply := exec.Command(kubectl, "--kubeconfig", h.Cluster.Kubeconfig, "apply", "--server-side", "--force-conflicts",
		"--field-manager", "realpod-test", "-f", "-")
	apply.Stdin = strings.NewReader(string(out))
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// setLabel labels a Node, as `kubectl label node` does.
func setLabel(ctx context.Context, t *testing.T, h *harness.Harness, node, key, value string) {
	t.Helper()
	client := h.Cluster.Client()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Labels[key] = value
		_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// readmeValues returns the values README.md's install shows and the ring
// they configure (the observers' configuration the chart renders of them).
func readmeValues(t *testing.T, helm string) (map[string]any, *config.Config) {
	t.Helper()
	readme, err := cluster.ReadmeHelmValues()
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal([]byte(readme), &values); err != nil {
		t.Fatal(err)
	}
	ring, err := observerConfig(helm, values)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the README's values: cluster %q, gossip port %d", ring.ClusterName, ring.Gossip.Port)
	return values, ring
}

// startRealNode builds both images (make image, make image-fence-agents)
// for this machine and starts the real node with them in its runtime.
func startRealNode(ctx context.Context, t *testing.T, h *harness.Harness) *realnode.Node {
	t.Helper()
	return realnode.Start(ctx, t, h, realnode.Options{
		Images: []string{buildImage(t), buildFenceAgentsImage(t)},
		Logind: true,
	})
}

// prepareReadmeInstall does what the README's install does before helm
// install, on the harness: the gossip key Secret (the harness's key), the
// credentials Secret (the harness's BMC passwords and fence devices'
// secrets), and the hosts that run their agent outside the DaemonSets
// (the hollow machines) labelled. It changes the README's values only
// where the README says to: the images (built here, not pulled), and the
// fencers' inventory — the harness's fencer configuration (its bmc, and
// fenceDevices, topology and fencer settings when it has them). It returns
// the values' fencers section.
func prepareReadmeInstall(ctx context.Context, t *testing.T, h *harness.Harness, values map[string]any) map[string]any {
	t.Helper()
	for _, m := range h.Machines {
		setLabel(ctx, t, h, m.Name, systemdLabel, "systemd")
	}
	gossipKey, err := os.ReadFile(filepath.Join(h.Dir, "fenced", "gossip.key"))
	if err != nil {
		t.Fatal(err)
	}
	createSecret(ctx, t, h, "fenced-gossip-key", map[string][]byte{"key": gossipKey})
	values["image"] = map[string]any{"repository": imageRepository, "tag": imageTag}
	fencers := values["fencers"].(map[string]any)
	fencers["image"] = map[string]any{"repository": fenceAgentsImageRepository, "tag": imageTag}
	for section, v := range harnessFencerSections(ctx, t, h) {
		fencers[section] = v
	}
	return fencers
}

// goLive turns the fencers' dry-run off, as the README's "Go live" does.
func goLive(fencers map[string]any) {
	fencers["policy"].(map[string]any)["dryRun"] = false
}

// createSecret creates a Secret in the release namespace, as `kubectl
// create secret generic` does.
func createSecret(ctx context.Context, t *testing.T, h *harness.Harness, name string, data map[string][]byte) {
	t.Helper()
	if _, err := h.Cluster.Client().CoreV1().Secrets(harness.LeaseNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       data,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// harnessFencerSections are the sections of the harness's own fencer
// configuration a user writes under the chart's fencers: bmc, and
// fenceDevices, topology and fencer when it has them (the fencer section
// without leaseNamespace, which the chart sets). Password and secret files
// move to the path the chart mounts the credentials Secret at; the Secret
// fenced-bmc is created from them.
func harnessFencerSections(ctx context.Context, t *testing.T, h *harness.Harness) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(h.FencerConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	var fencerConfig map[string]any
	if err := yaml.Unmarshal(raw, &fencerConfig); err != nil {
		t.Fatal(err)
	}
	sections := map[string]any{}
	secrets := map[string][]byte{}
	bmc := fencerConfig["bmc"].(map[string]any)
	for _, n := range bmc["nodes"].([]any) {
		entry := n.(map[string]any)
		name := entry["name"].(string)
		pw, err := os.ReadFile(entry["passwordFile"].(string))
		if err != nil {
			t.Fatal(err)
		}
		secrets[name] = pw
		entry["passwordFile"] = "/etc/fenced/bmc/" + name
	}
	sections["bmc"] = bmc
	// Fence devices' secret files (a PDU's community), in the same Secret.
	if devices, ok := fencerConfig["fenceDevices"].([]any); ok {
		for _, d := range devices {
			device := d.(map[string]any)
			options, _ := device["secretOptions"].(map[string]any)
			for option, file := range options {
				key := device["name"].(string) + "." + option
				value, err := os.ReadFile(file.(string))
				if err != nil {
					t.Fatal(err)
				}
				secrets[key] = value
				options[option] = "/etc/fenced/bmc/" + key
			}
		}
		sections["fenceDevices"] = devices
	}
	if topology, ok := fencerConfig["topology"]; ok {
		sections["topology"] = topology
	}
	if fencer, ok := fencerConfig["fencer"].(map[string]any); ok {
		delete(fencer, "leaseNamespace")
		if len(fencer) > 0 {
			sections["fencer"] = fencer
		}
	}
	createSecret(ctx, t, h, "fenced-bmc", secrets)
	return sections
}

// waitPodReady waits for the pod of the chart's DaemonSet role on node to be
// Running and Ready, and returns it.
func waitPodReady(ctx context.Context, t *testing.T, h *harness.Harness, role string, node *realnode.Node) *corev1.Pod {
	t.Helper()
	pod, err := h.WaitPodOn(ctx, harness.LeaseNamespace, "app.kubernetes.io/component="+role, node.Name, "", podReadyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	ready, err := h.WaitPodReady(ctx, harness.LeaseNamespace, pod.Name, node.Name, podReadyTimeout)
	if err != nil {
		logs, _ := node.ContainerLog(pod, "fenced")
		t.Fatalf("%v\nits log:\n%s", err, cluster.LastLines(logs, 40))
	}
	return ready
}

// readySince is when the pod became Ready, zero if it is not.
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// requireHardened checks that the pod runs as the chart says, as admitted:
// the kubelet would refuse to start a container it cannot run this way.
func requireHardened(t *testing.T, p *corev1.Pod) {
	t.Helper()
	c := p.Spec.Containers[0]
	sc, psc := c.SecurityContext, p.Spec.SecurityContext
	if !p.Spec.HostNetwork || sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("pod %s is not run as the chart says (hostNetwork, read-only root, no capabilities, RuntimeDefault seccomp): %+v %+v", p.Name, psc, sc)
	}
	for _, v := range []string{"dbus", "kubelet-dir", "boot-id"} {
		found := false
		for _, m := range c.VolumeMounts {
			found = found || m.Name == v
		}
		if !found {
			t.Fatalf("pod %s lacks the %s mount", p.Name, v)
		}
	}
}

// requireUnprivileged checks, from the host, what the runtime made of the
// chart's securityContext: the agent's process has no capability in any
// set, cannot gain one, and runs under a seccomp filter.
func requireUnprivileged(t *testing.T, node *realnode.Node, p *corev1.Pod) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, proc := range procs {
		cmdline, err := os.ReadFile(proc)
		if err != nil || !strings.HasPrefix(string(cmdline), "/usr/local/bin/fenced\x00agent\x00") {
			continue
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(proc), "status"))
		if err != nil {
			continue
		}
		fields := map[string]string{}
		for _, line := range strings.Split(string(status), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
		for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if fields[set] != "0000000000000000" {
				t.Errorf("the agent of pod %s has capabilities: %s %s", p.Name, set, fields[set])
			}
		}
		if fields["NoNewPrivs"] != "1" || fields["Seccomp"] != "2" {
			t.Errorf("the agent of pod %s: NoNewPrivs %s, Seccomp %s; want 1 and 2 (filter)", p.Name, fields["NoNewPrivs"], fields["Seccomp"])
		}
		t.Logf("the agent's process %s: uid %s, no capabilities, no new privileges, seccomp filter", filepath.Dir(proc), strings.Fields(fields["Uid"])[0])
		return
	}
	t.Fatalf("no /usr/local/bin/fenced agent process on %s", node.Name)
}

func waitMetrics(ctx context.Context, t *testing.T, who string, get func() (string, error), want string) {
	t.Helper()
	var err error
	if wait.PollUntilContextTimeout(ctx, time.Second, podReadyTimeout, true, func(context.Context) (bool, error) {
		var text string
		text, err = get()
		return err == nil && strings.Contains(text, want+"\n"), nil
	}) != nil {
		t.Fatalf("%s: no %q in the metrics after %s (err %v)", who, want, podReadyTimeout, err)
	}
}

// waitInhibitors waits for the node's logind to hold the fenced agent's and
// the kubelet's shutdown delay locks.
func waitInhibitors(ctx context.Context, t *testing.T, node *realnode.Node) {
	t.Helper()
	if wait.PollUntilContextTimeout(ctx, time.Second, podReadyTimeout, true, func(context.Context) (bool, error) {
		var fenced, kubelet bool
		for _, i := range node.Logind.Inhibitors() {
			fenced = fenced || (strings.Contains(strings.ToLower(i.Who), "fenced") && i.Mode == "delay")
			kubelet = kubelet || (strings.Contains(strings.ToLower(i.Who), "kubelet") && i.Mode == "delay")
		}
		return fenced && kubelet, nil
	}) != nil {
		t.Fatalf("logind on %s holds %v; want the fenced agent's and the kubelet's delay locks", node.Name, node.Logind.Inhibitors())
	}
	t.Logf("logind on %s holds: %v", node.Name, node.Logind.Inhibitors())
}

// waitTainted waits for fenced's out-of-service taint on node and returns
// the evidence recorded with it.
func waitTainted(ctx context.Context, t *testing.T, h *harness.Harness, node string) core.Evidence {
	t.Helper()
	var tainted *corev1.Node
	if wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, fenceTimeout, true, func(ctx context.Context) (bool, error) {
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil && taint.HasTaint(n) {
			tainted = n
		}
		return tainted != nil, nil
	}) != nil {
		t.Fatalf("%s not tainted out-of-service %s after its power loss", node, fenceTimeout)
	}
	ev, ok, err := taint.EvidenceOf(tainted)
	if !ok || err != nil {
		t.Fatalf("%s is tainted without evidence (%v)", node, err)
	}
	return ev
}
