package harness

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"fenced.io/fenced/internal/testbed/machine"
	"fenced.io/fenced/internal/testbed/secretvolume"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/stale"
	"fenced.io/fenced/pkg/taint"
)

// Fencing runs `fenced agent` on every machine.
type Fencing struct {
	// ClusterName and GossipPort are the ring's label and port (default:
	// the constants ClusterName and GossipPort), for a test whose agents
	// must join a ring configured elsewhere, e.g. by the chart's values.
	ClusterName string
	GossipPort  int
	// Fencers are the machines whose agents hold the BMC inventory. They
	// stand for control-plane hosts: labeled control-plane and tainted
	// NoSchedule, so workloads run on the other machines.
	Fencers []string
	// Policy is the body of the configuration's policy section, e.g.
	// "{mode: power-off, fenceAfter: 5s}" (default: the built-in policy).
	Policy string
	// BMCIdentityMismatch are machines whose BMC reports another machine's
	// system UUID, as when the inventory points at the wrong BMC.
	BMCIdentityMismatch []string
	// BMCTimeout bounds one attempt of one BMC request (default 1s).
	BMCTimeout time.Duration
	// Topology, if set, is the body of the fencers' topology section in
	// YAML flow style, e.g. "{defaults: [[bmc], [pdu-a, pdu-b]]}". With it
	// the fencers' configuration also declares fenceDevices: one
	// fence_apc_snmp device per PDU (Options.Feeds), named after the PDU,
	// each machine mapped to its outlet, and with IPMILanDevices one
	// fence_ipmilan device per machine. Without it there are neither
	// (the configuration of a BMC-only cluster, as before topologies).
	Topology string
	// IPMILanDevices declares, with Topology, a fence_ipmilan device
	// IPMILanDevice(machine) for every machine's BMC: ClusterLabs' agent
	// on the same ipmi_sim the native driver reads.
	IPMILanDevices bool
	// PDUPlugs replaces the plugs map (machine → outlet) of the named
	// PDUs' devices, e.g. to map a machine to another one's outlet (a
	// mislabelled outlet). Machines left out get no plug on that device.
	PDUPlugs map[string]map[string]string
	// FenceAgentTimeout bounds one call of a fence agent (default 20s):
	// an SNMP agent that hears nothing back gives up on its own first.
	FenceAgentTimeout time.Duration
	// MonitorInterval is fencer.monitorInterval (default: the built-in).
	MonitorInterval time.Duration
	// Gossip is added to every agent's gossip section in YAML flow style,
	// e.g. "profile: fast" (default: nothing, the built-in profile).
	Gossip string
	// AgentBinary is the fenced binary every agent starts from (default:
	// cmd/fenced of this tree, CurrentFenced), e.g. an earlier release's
	// (FencedAt) for an upgrade; Machine.UpgradeAgent replaces it on one
	// machine.
	AgentBinary string

	// GossipKeyDirs gives each machine's agent its own copy of the gossip
	// keys (gossip.keyDir, GossipKeyDir), written as the kubelet writes a
	// Secret volume (internal/testbed/secretvolume), as each node holds
	// its own copy of the Secret: SetGossipKeys updates one machine's
	// copy, as a Secret's update reaches each kubelet at its own time.
	// Each machine then reads a configuration of its own
	// (MachineConfigFile). Without it every agent reads one
	// gossip.keyFile.
	GossipKeyDirs bool

	// Watchdog, if set, puts machines on the watchdog level (watchdog.go):
	// the harness writes the fencers' topology then (not with Topology),
	// and each machine reads a configuration of its own
	// (MachineConfigFile). Not with ConfigVolume.
	Watchdog *Watchdog

	// ConfigVolume makes the fencers read their configuration from a
	// directory written as the kubelet writes a ConfigMap volume
	// (internal/testbed/secretvolume: config.yaml a symlink into ..data,
	// ..data swapped in one rename), as the fencer DaemonSet mounts its
	// ConfigMap: SetFencerConfig then changes it as an update of the
	// ConfigMap does, which is what a reload sees in a cluster. Not with
	// GossipKeyDirs (each machine then reads a file of its own).
	ConfigVolume bool
}

// IPMILanDevice is the name of machine's fence_ipmilan device
// (Fencing.IPMILanDevices).
func IPMILanDevice(machine string) string { return "ipmi-" + machine }

// Agent identities and their RBAC: observers read Nodes; fencers do what
// pkg/taint documents plus VolumeAttachments, their power Leases and
// reading the agent identity policy; every agent writes its own key Lease.
// Each agent's user name is AgentUser(machine), as a systemd-run agent's
// host credential is (deploy/systemd/README.md).
const (
	agentGroup     = "fenced:agents"
	fencerGroup    = "fenced:fencers"
	LeaseNamespace = "fenced-system"
	// MetricsPort is where every agent serves /metrics in its namespace.
	MetricsPort = 9740
	// GossipPort is where every agent gossips in its namespace.
	GossipPort = 7946
	// ClusterName is the gossip label of the harness's ring.
	ClusterName = "harness"
)

// AgentUser is the user name of machine's agent: fenced:node:<machine>, the
// form the agent identity policy binds to node <machine>.
func AgentUser(machine string) string { return "fenced:node:" + machine }

// agentIdentityPolicyFile is the ValidatingAdmissionPolicy (and binding) that
// lets only a node's own agent write its key Lease, and fenceOrderPolicyFile
// the one that lets only fencers write or delete fence orders; the harness
// installs the very files the deployment ships.
const (
	agentIdentityPolicyFile = "deploy/daemonset/base/agent-identity-policy.yaml"
	fenceOrderPolicyFile    = "deploy/daemonset/base/fence-order-policy.yaml"
)

func (h *Harness) setupFencing(ctx context.Context, f *Fencing) error {
	client := h.Cluster.Client()
	if _, err := h.Cluster.CreateNamespace(ctx, LeaseNamespace); err != nil {
		return err
	}
	if err := installPolicy(ctx, h, agentIdentityPolicyFile, publish.ShippedFor); err != nil {
		return err
	}
	if err := installPolicy(ctx, h, fenceOrderPolicyFile, publish.OrderPolicyFor); err != nil {
		return err
	}
	fencerRules := append(taint.PolicyRules(),
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"get", "list", "watch"}},
		// publish.PolicyInForce, OrderPolicyInForce.
		rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"},
			Resources:     []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
			ResourceNames: []string{publish.PolicyName, publish.OrderPolicyName}, Verbs: []string{"get"}})
	// The stale VolumeAttachment report (pkg/stale), as the base manifests.
	fencerRules = append(fencerRules, stale.PolicyRules()...)
	roles := []struct {
		name  string
		group string
		rules []rbacv1.PolicyRule
	}{
		{"fenced-agent", agentGroup, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}},
		{"fenced-fencer", fencerGroup, fencerRules},
	}
	for _, r := range roles {
		if _, err := client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.name}, Rules: r.rules}, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: r.name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: r.name},
			Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: r.group}},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	// In the lease namespace: the fencers' power Leases, and every agent's
	// own key Lease (publish.Publish). In kube-node-lease: the kubelets'
	// heartbeats, which fencers read (a renewal after a power reading voids
	// it).
	for _, r := range []struct {
		namespace, name string
		verbs           []string
		groups          []string
	}{
		{LeaseNamespace, "fenced-leases", []string{"get", "list", "watch", "create", "update", "delete"}, []string{fencerGroup}},
		{LeaseNamespace, "fenced-agent-leases", []string{"get", "create", "update"}, []string{agentGroup, fencerGroup}},
		{corev1.NamespaceNodeLease, "fenced-kubelet-leases", []string{"get", "list", "watch"}, []string{fencerGroup}},
	} {
		if _, err := client.RbacV1().Roles(r.namespace).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: r.name},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: r.verbs}},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
		var subjects []rbacv1.Subject
		for _, g := range r.groups {
			subjects = append(subjects, rbacv1.Subject{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: g})
		}
		if _, err := client.RbacV1().RoleBindings(r.namespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: r.name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: r.name},
			Subjects:   subjects,
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return grantConfigMaps(ctx, client)
}

// grantConfigMaps gives the fencers what deploy/daemonset/base/rbac.yaml
// gives them of the ConfigMaps in the lease namespace: read the pause
// (that object only), read and update the fence history (that object
// only) and create it.
func grantConfigMaps(ctx context.Context, client kubernetes.Interface) error {
	const name = "fenced-fencer-configmaps"
	if _, err := client.RbacV1().Roles(LeaseNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{taint.PauseConfigMap}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{taint.HistoryConfigMap}, Verbs: []string{"get", "update"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := client.RbacV1().RoleBindings(LeaseNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: fencerGroup}},
	}, metav1.CreateOptions{})
	return err
}

// installPolicy creates the objects the deployment ships in file (built
// into the binaries: shipped is publish.ShippedFor or OrderPolicyFor), its
// binding covering LeaseNamespace (as kustomize's namespace transformer
// does for the deployment).
func installPolicy(ctx context.Context, h *Harness, file string,
	shipped func(ns string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error)) error {
	p, b, err := shipped(LeaseNamespace)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	adm := h.Cluster.Client().AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// writeFencingConfigs writes the gossip key, the observers' configuration
// and the fencers' one (with the BMC inventory of every machine).
func (h *Harness) writeFencingConfigs(f *Fencing) (observer, fencer string, err error) {
	dir := filepath.Join(h.Dir, "fenced")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	if f.ConfigVolume && f.perMachineConfigs() {
		return "", "", errors.New("harness: Fencing.ConfigVolume with Fencing.GossipKeyDirs or Watchdog: the machines would not read the volume")
	}
	if f.Watchdog != nil && f.Topology != "" {
		return "", "", errors.New("harness: Fencing.Watchdog writes the fencers' topology: leave Fencing.Topology empty")
	}
	h.fencerConfigVolume = f.ConfigVolume
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyFile := filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return "", "", err
	}
	keySource := "keyFile: " + keyFile
	if f.GossipKeyDirs {
		keySource = "keyDir: " + machineKeyDir
		for _, m := range h.Machines {
			if err := h.SetGossipKeys(m, map[string][]byte{"key": key}); err != nil {
				return "", "", err
			}
		}
	}
	fencerSection := "leaseNamespace: " + LeaseNamespace
	if f.MonitorInterval > 0 {
		fencerSection += ", monitorInterval: " + f.MonitorInterval.String()
	}
	clusterName, gossipPort := ClusterName, GossipPort
	if f.ClusterName != "" {
		clusterName = f.ClusterName
	}
	if f.GossipPort != 0 {
		gossipPort = f.GossipPort
	}
	gossipSection := fmt.Sprintf("port: %d, %s", gossipPort, keySource)
	if f.Gossip != "" {
		gossipSection += ", " + f.Gossip
	}
	common := fmt.Sprintf("apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\nclusterName: %s\n"+
		"gossip: {%s}\nfencer: {%s}\n", clusterName, gossipSection, fencerSection)
	if f.Policy != "" {
		common += "policy: " + f.Policy + "\n"
	}
	observer = filepath.Join(dir, "observer.yaml")
	if err := os.WriteFile(observer, []byte(common), 0o600); err != nil {
		return "", "", err
	}
	var inv strings.Builder
	timeout := time.Second
	if f.BMCTimeout > 0 {
		timeout = f.BMCTimeout
	}
	fmt.Fprintf(&inv, "bmc:\n  defaults: {protocol: ipmi, username: admin, timeout: %s, retries: 1}\n  nodes:\n", timeout)
	for _, m := range h.Machines {
		pw := filepath.Join(dir, m.Name+".bmc-password")
		if err := os.WriteFile(pw, []byte(m.bmcPassword+"\n"), 0o600); err != nil {
			return "", "", err
		}
		fmt.Fprintf(&inv, "    - {name: %s, address: %s, port: %d, passwordFile: %s}\n", m.Name, m.bmcAddr, m.bmcPort, pw)
	}
	if f.Topology != "" {
		h.writeTopology(&inv, f, dir)
	}
	if f.Watchdog != nil {
		inv.WriteString(f.Watchdog.fencerConfig())
	}
	fencer = h.FencerConfigFile()
	// Valid on its own: the device of a machine (the first), which no
	// fencer arms — their own levels are [[bmc]] — and the machines read
	// their own configurations with Watchdog.
	if err := h.SetFencerConfig(strings.ReplaceAll(common+inv.String(), machineWatchdogDevice, h.Machines[0].WatchdogDevice())); err != nil {
		return "", "", err
	}
	if f.perMachineConfigs() {
		for _, m := range h.Machines {
			text := common
			switch {
			case m.Fencer:
				text += inv.String()
			case f.Watchdog != nil:
				text += f.Watchdog.agentConfig(m.Name)
			}
			text = strings.ReplaceAll(text, machineKeyDir, h.GossipKeyDir(m))
			text = strings.ReplaceAll(text, machineWatchdogDevice, m.WatchdogDevice())
			if err := os.WriteFile(h.MachineConfigFile(m), []byte(text), 0o600); err != nil {
				return "", "", err
			}
		}
	}
	return observer, fencer, nil
}

// perMachineConfigs reports whether each machine reads a configuration of
// its own (MachineConfigFile).
func (f *Fencing) perMachineConfigs() bool { return f.GossipKeyDirs || f.Watchdog != nil }

// machineKeyDir stands for GossipKeyDir(machine) in the configurations
// that MachineConfigFile's are made from.
const machineKeyDir = "MACHINE-KEY-DIR"

// GossipKeyDir is machine m's copy of the gossip keys (Fencing.GossipKeyDirs).
func (h *Harness) GossipKeyDir(m *Machine) string {
	return filepath.Join(h.Dir, "fenced", "gossip-keys", m.Name)
}

// MachineConfigFile is the configuration machine m's agent reads with
// Fencing.GossipKeyDirs: the observers' or FencerConfigFile's, with m's
// own key directory.
func (h *Harness) MachineConfigFile(m *Machine) string {
	return filepath.Join(h.Dir, "fenced", m.Name+".yaml")
}

// SetGossipKeys makes machine m's copy of the gossip keys hold keys, file
// name → key ("key" is the primary, the rest secondaries), swapped in at
// once as the kubelet updates a Secret volume, mode 0440 as the
// deployment mounts it. m's agent reads it within a few seconds.
func (h *Harness) SetGossipKeys(m *Machine, keys map[string][]byte) error {
	files := make(map[string][]byte, len(keys))
	for name, k := range keys {
		files[name] = []byte(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	return secretvolume.Write(h.GossipKeyDir(m), files, 0o440)
}

// FencerConfigFile is the configuration file the fencers' agents read. A
// test may rewrite it — say, to leave dry-run — and RestartAgent a fencer,
// or change it with SetFencerConfig, which a running fencer reloads.
func (h *Harness) FencerConfigFile() string {
	if h.fencerConfigVolume {
		return filepath.Join(h.fencerConfigVolumeDir(), fencerConfigKey)
	}
	return filepath.Join(h.Dir, "fenced", "fencer.yaml")
}

// fencerConfigKey is the key of the fencers' configuration in their
// ConfigMap volume (Fencing.ConfigVolume), as the deployment names it.
const fencerConfigKey = "config.yaml"

func (h *Harness) fencerConfigVolumeDir() string {
	return filepath.Join(h.Dir, "fenced", "fencer-config")
}

// SetFencerConfig replaces the fencers' configuration with text at once:
// with Fencing.ConfigVolume as the kubelet updates a ConfigMap volume (a
// new ..data swapped in), else by a rename over FencerConfigFile — never
// a file half-written.
func (h *Harness) SetFencerConfig(text string) error {
	if h.fencerConfigVolume {
		return secretvolume.Write(h.fencerConfigVolumeDir(), map[string][]byte{fencerConfigKey: []byte(text)}, 0o644)
	}
	file := h.FencerConfigFile()
	tmp := filepath.Join(filepath.Dir(file), ".fencer.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// writeTopology appends the fenceDevices and topology sections: the PDUs
// through fence_apc_snmp (their community files as secretOptions, so a
// test that rewrites one changes what the fencers send from their next
// call on), and the BMCs through fence_ipmilan.
func (h *Harness) writeTopology(w *strings.Builder, f *Fencing, dir string) {
	timeout := 20 * time.Second
	if f.FenceAgentTimeout > 0 {
		timeout = f.FenceAgentTimeout
	}
	w.WriteString("fenceDevices:\n")
	for _, p := range h.pdus {
		plugs := map[string]string{}
		for _, m := range h.Machines {
			for _, o := range m.Outlets() {
				if o.PDU == p.Name {
					plugs[m.Name] = strconv.Itoa(o.Number)
				}
			}
		}
		if override, ok := f.PDUPlugs[p.Name]; ok {
			plugs = override
		}
		var pl []string
		for _, m := range slices.Sorted(maps.Keys(plugs)) {
			pl = append(pl, fmt.Sprintf("%s: %q", m, plugs[m]))
		}
		fmt.Fprintf(w, "  - name: %s\n    agent: fence_apc_snmp\n    options: {ip: %s, ipport: \"%d\", snmp_version: \"2c\"}\n"+
			"    secretOptions: {community: %s}\n    plugs: {%s}\n    timeout: %s\n",
			p.Name, p.Host, p.Port, p.CommunityFile, strings.Join(pl, ", "), timeout)
	}
	if f.IPMILanDevices {
		for _, m := range h.Machines {
			fmt.Fprintf(w, "  - name: %s\n    agent: fence_ipmilan\n"+
				"    options: {ip: %s, ipport: \"%d\", username: admin, lanplus: \"1\", cipher: \"3\", privlvl: administrator}\n"+
				"    secretOptions: {password: %s}\n    timeout: %s\n",
				IPMILanDevice(m.Name), m.bmcAddr, m.bmcPort, filepath.Join(dir, m.Name+".bmc-password"), timeout)
		}
	}
	w.WriteString("topology: " + f.Topology + "\n")
}

// GossipKey is the ring's shared key, which every agent holds at start:
// what a compromised worker would have (for the hostile-member scenarios).
func (h *Harness) GossipKey() ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(h.Dir, "fenced", "gossip.key"))
	if err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
}

// agentArgv is the agent a machine runs at boot: binary, started through
// the machine's agent link (upgrade.go).
func (h *Harness) agentArgv(m *Machine, config, binary string) ([]string, error) {
	kubeconfig, err := h.Cluster.UserKubeconfig(AgentUser(m.Name), m.agentGroup())
	if err != nil {
		return nil, err
	}
	if err := m.linkAgent(binary); err != nil {
		return nil, err
	}
	return []string{m.agentLink(), "agent",
		"--config=" + config,
		"--kubeconfig=" + kubeconfig,
		"--node-name=" + m.Name,
		"--kubelet-root-dir=" + machine.KubeletRootDir(m.Dir),
		"--metrics-address=" + m.Host.Addr.String() + ":" + strconv.Itoa(MetricsPort),
		"-v",
	}, nil
}

// agentGroup is the group of m's agent's credentials.
func (m *Machine) agentGroup() string {
	if m.Fencer {
		return fencerGroup
	}
	return agentGroup
}

// AgentClient is a client with the credentials machine m's agent holds:
// what a compromised node can do with them.
func (h *Harness) AgentClient(m *Machine) (kubernetes.Interface, error) {
	return h.Cluster.UserClient(AgentUser(m.Name), m.agentGroup())
}

// markControlPlane labels and taints a fencer machine's Node the way
// kubeadm does for control-plane nodes.
func (h *Harness) markControlPlane(ctx context.Context, name string) error {
	// The kubelet and the lifecycle controller write the Node too.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
		_, err = h.Cluster.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// Metrics returns the machine's agent's /metrics text.
func (m *Machine) Metrics() (string, error) { return Scrape(m.Host.Addr) }

// Scrape gets the metrics of the agent at addr (port MetricsPort), as
// Prometheus would.
func Scrape(addr netip.Addr) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s:%d/metrics", addr, MetricsPort))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// AgentLog returns the machine's agent log (all boots).
func (m *Machine) AgentLog() string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, "extra-0-fenced.log"))
	return string(b)
}

// WaitRingConverged waits until every fencer sees every machine alive in
// the gossip ring, so that scenarios start from a complete view.
func (h *Harness) WaitRingConverged(ctx context.Context, timeout time.Duration) error {
	want := fmt.Sprintf(`fenced_members{state="alive"} %d`, len(h.Machines))
	deadline := time.Now().Add(timeout)
	for _, m := range h.Machines {
		if !m.Fencer {
			continue
		}
		for {
			text, _ := m.Metrics()
			if strings.Contains(text, want+"\n") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("fencer %s does not see all %d machines alive in the gossip ring after %s", m.Name, len(h.Machines), timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}
