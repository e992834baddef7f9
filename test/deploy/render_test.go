package deploy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/shutdown"
)

// kustomization is one directory `kubectl kustomize` renders.
type kustomization struct {
	dir string
	// daemonSets the render holds, by role.
	observer, fencer, watchdog bool
	// external are the Secrets and ConfigMaps the DaemonSets mount that
	// the render does not contain ("Secret/name"): created by hand or by
	// run-power-loss.sh.
	external []string
}

var kustomizations = []kustomization{
	{dir: "deploy/daemonset", observer: true, external: []string{"Secret/fenced-gossip-key"}},
	{dir: "deploy/daemonset/base", observer: true, external: []string{"Secret/fenced-gossip-key"}},
	{dir: "deploy/daemonset/overlays/example", observer: true},
	{dir: "deploy/daemonset/overlays/in-cluster-fencers", observer: true, fencer: true},
	{dir: "deploy/daemonset/overlays/watchdog", observer: true, watchdog: true},
	{dir: "test/kind/overlay", observer: true, fencer: true,
		external: []string{"Secret/fenced-gossip-key", "Secret/fenced-bmc", "ConfigMap/fenced-fencer-config"}},
}

// render runs `kubectl kustomize dir` and decodes the result strictly.
func render(t *testing.T, kubectl, dir string) ([]byte, []k8sruntime.Object) {
	t.Helper()
	out, stderr, err := run(t, nil, kubectl, "kustomize", path(t, dir))
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr)
	}
	return []byte(out), decodeObjects(t, "kubectl kustomize "+dir, []byte(out))
}

// TestKustomizationsAreListed: a new kustomization must join the list
// above, so it gets rendered and checked.
func TestKustomizationsAreListed(t *testing.T) {
	var listed []string
	for _, k := range kustomizations {
		listed = append(listed, k.dir)
	}
	// Directories that kustomizations list under transformers: render to
	// transformer configurations, not objects to check (kubeNodeLeaseDir).
	var transformerSets []string
	for _, k := range kustomizations {
		var kf struct {
			Transformers []string `json:"transformers"`
		}
		if err := yaml.Unmarshal(readFile(t, k.dir, "kustomization.yaml"), &kf); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", k.dir, err)
		}
		for _, tr := range kf.Transformers {
			transformerSets = append(transformerSets, filepath.Join(k.dir, tr))
		}
	}
	if !slices.Contains(transformerSets, kubeNodeLeaseDir) {
		t.Errorf("no kustomization lists %s under transformers:", kubeNodeLeaseDir)
	}
	for _, root := range []string{"deploy", "test/kind"} {
		err := filepath.WalkDir(path(t, root), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
				return err
			}
			dir := rel(t, filepath.Dir(p))
			// Components only render inside a kustomization that uses them.
			if strings.Contains(dir, "/components/") || slices.Contains(transformerSets, dir) {
				return nil
			}
			if !slices.Contains(listed, dir) {
				t.Errorf("%s is not in render_test.go's kustomizations: add it, so that it is rendered and checked", dir)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRenderedManifests renders every kustomization and checks what the
// agent relies on and what least privilege demands, object by object.
func TestRenderedManifests(t *testing.T) {
	kubectl := kubectlPath(t)
	base := collectRBAC(decodeObjects(t, rbacFile, readFile(t, rbacFile)))
	for _, k := range kustomizations {
		t.Run(k.dir, func(t *testing.T) {
			_, objs := render(t, kubectl, k.dir)
			checkRender(t, k, objs, base)
		})
	}
}

// rendered indexes a render's objects.
type rendered struct {
	daemonSets map[string]*appsv1.DaemonSet
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	// The agent identity policy (agent-identity-policy.yaml).
	policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	// The fence orders' policy (fence-order-policy.yaml).
	orderPolicy  *admissionregistrationv1.ValidatingAdmissionPolicy
	orderBinding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// policyNamespace is the namespace a binding of the agent identity policy
// covers ("" if it does not select exactly one namespace by name).
func policyNamespace(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) string {
	if b == nil || b.Spec.MatchResources == nil || b.Spec.MatchResources.NamespaceSelector == nil {
		return ""
	}
	sel := b.Spec.MatchResources.NamespaceSelector
	if len(sel.MatchExpressions) > 0 || len(sel.MatchLabels) != 1 {
		return ""
	}
	return sel.MatchLabels[corev1.LabelMetadataName]
}

func checkRender(t *testing.T, k kustomization, objs []k8sruntime.Object, base rbacObjects) {
	r := rendered{daemonSets: map[string]*appsv1.DaemonSet{}, configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			r.daemonSets[o.Name] = o
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *corev1.Secret:
			r.secrets[o.Name] = o
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			switch o.Name {
			case publish.PolicyName:
				r.policy = o
			case publish.OrderPolicyName:
				r.orderPolicy = o
			}
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			switch o.Name {
			case publish.PolicyName:
				r.binding = o
			case publish.OrderPolicyName:
				r.orderBinding = o
			}
		}
		// Everything namespaced lives in fenced-system, but for the
		// fencer's Role and RoleBinding on the kubelets' Leases. (kustomize
		// gives the admission policy objects a metadata.namespace too, not
		// knowing they are cluster-scoped; the API server drops it.)
		if m, ok := o.(interface{ GetNamespace() string }); ok {
			switch o.(type) {
			case *corev1.Namespace, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding,
				*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			case *rbacv1.Role, *rbacv1.RoleBinding:
				switch want, _ := roleNamespace(name(o)); {
				case m.GetNamespace() == want:
				case name(o) == kubeletLeaseRole:
					kubeletLeasesAstray(t, k, "%T %v is in namespace %q, want %s", o, name(o), m.GetNamespace(), want)
				default:
					t.Errorf("%T %v is in namespace %q, want %s", o, name(o), m.GetNamespace(), want)
				}
			default:
				if m.GetNamespace() != namespace {
					t.Errorf("%T %v is in namespace %q, want %s", o, name(o), m.GetNamespace(), namespace)
				}
			}
		}
	}

	// No overlay may touch the RBAC: it is the base's, exactly.
	got := collectRBAC(objs)
	for _, pair := range [][2]any{
		{got.clusterRoles, base.clusterRoles}, {got.clusterRoleBindings, base.clusterRoleBindings},
		{got.roles, base.roles}, {got.roleBindings, base.roleBindings},
	} {
		if !sameRBAC(pair[0], pair[1]) {
			t.Errorf("RBAC differs from %s: %v", rbacFile, reflect.ValueOf(pair[0]).MapKeys())
		}
	}

	// Every install has the agent identity policy, covering the namespace
	// the agents publish their keys in: without it fencers believe no
	// node's signed word (publish.PolicyInForce).
	if r.policy == nil || r.binding == nil {
		t.Errorf("no ValidatingAdmissionPolicy and binding %s (%s)", publish.PolicyName, policyFile)
	} else if ns := policyNamespace(r.binding); ns != namespace {
		t.Errorf("the binding of %s covers namespace %q, want %s", publish.PolicyName, ns, namespace)
	}
	// And the fence orders' policy: without it no node is fenced on its
	// watchdog level (publish.OrderPolicyInForce).
	if r.orderPolicy == nil || r.orderBinding == nil {
		t.Errorf("no ValidatingAdmissionPolicy and binding %s (deploy/daemonset/base/fence-order-policy.yaml)", publish.OrderPolicyName)
	} else if ns := policyNamespace(r.orderBinding); ns != namespace {
		t.Errorf("the binding of %s covers namespace %q, want %s", publish.OrderPolicyName, ns, namespace)
	}

	want := map[string]bool{"fenced-observer": k.observer, "fenced-fencer": k.fencer, watchdogDaemonSet: k.watchdog}
	for n, w := range want {
		if _, ok := r.daemonSets[n]; ok != w {
			t.Errorf("DaemonSet %s present: %v, want %v", n, ok, w)
		}
	}
	var images, clusterNames []string
	for _, ds := range r.daemonSets {
		fencer := ds.Name == "fenced-fencer"
		cfg := checkDaemonSet(t, k, r, ds, fencer)
		if cfg != nil && cfg.ArmsWatchdog("any") != (ds.Name == watchdogDaemonSet) {
			t.Errorf("DaemonSet %s arms a watchdog: %v (only %s's agents do)", ds.Name, cfg.ArmsWatchdog("any"), watchdogDaemonSet)
		}
		if cfg != nil {
			clusterNames = append(clusterNames, cfg.ClusterName)
			// Every agent publishes its key Lease in fencer.leaseNamespace.
			if ns := policyNamespace(r.binding); cfg.Fencer.LeaseNamespace != ns {
				t.Errorf("DaemonSet %s: fencer.leaseNamespace %q, but the agent identity policy covers %q", ds.Name, cfg.Fencer.LeaseNamespace, ns)
			}
			if fencer && cfg.Fencer.LeaseNamespace != base.roles[leaseRole].Namespace {
				t.Errorf("fencer.leaseNamespace %q, but the lease Role is in %q", cfg.Fencer.LeaseNamespace, base.roles[leaseRole].Namespace)
			}
		}
		images = append(images, ds.Spec.Template.Spec.Containers[0].Image)
		// Fencer nodes are off limits for observers, watchdog nodes for
		// the others.
		if !fencer && (k.fencer || ds.Name == watchdogDaemonSet) && !hasNodeExclusion(ds, fencerLabel, "true") {
			t.Errorf("DaemonSet %s does not avoid nodes labelled %s=true: two agents would share a node", ds.Name, fencerLabel)
		}
		if ds.Name != watchdogDaemonSet && k.watchdog && !hasNodeExclusion(ds, watchdogLabel, "true") {
			t.Errorf("DaemonSet %s does not avoid nodes labelled %s=true: two agents would share a node", ds.Name, watchdogLabel)
		}
	}
	slices.Sort(images)
	if len(slices.Compact(images)) > 1 {
		t.Errorf("DaemonSets run different images: %v", images)
	}
	// One ring per cluster: every config carries the same label.
	slices.Sort(clusterNames)
	if len(slices.Compact(clusterNames)) > 1 {
		t.Errorf("configs name different clusters %v: their agents would form separate rings", clusterNames)
	}
}

// kubeletLeasesAstray reports the fencer's kube-node-lease Role or
// RoleBinding out of place in k's render.
func kubeletLeasesAstray(t *testing.T, k kustomization, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Errorf("%s: a kustomization that sets namespace: moves it there, unless it lists %s under transformers: (see its kustomization.yaml)", msg, kubeNodeLeaseDir)
}

// sameRBAC compares two maps of RBAC objects by name, rules, role
// references and subjects (not metadata such as kustomize's labels).
func sameRBAC(a, b any) bool {
	norm := func(m any) map[string]any {
		out := map[string]any{}
		iter := reflect.ValueOf(m).MapRange()
		for iter.Next() {
			switch o := iter.Value().Interface().(type) {
			case *rbacv1.ClusterRole:
				out[o.Name] = o.Rules
			case *rbacv1.Role:
				out[o.Namespace+"/"+o.Name] = o.Rules
			case *rbacv1.ClusterRoleBinding:
				out[o.Name] = [2]any{o.RoleRef, o.Subjects}
			case *rbacv1.RoleBinding:
				out[o.Namespace+"/"+o.Name] = [2]any{o.RoleRef, o.Subjects}
			}
		}
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

func name(o k8sruntime.Object) string {
	if m, ok := o.(interface{ GetName() string }); ok {
		return m.GetName()
	}
	return "?"
}

// hasNodeExclusion: the pod's required node affinity keeps it off nodes
// with label key=value (in every term, since terms are ORed).
func hasNodeExclusion(ds *appsv1.DaemonSet, key, value string) bool {
	a := ds.Spec.Template.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, term := range terms {
		found := false
		for _, e := range term.MatchExpressions {
			if e.Key == key && (e.Operator == corev1.NodeSelectorOpNotIn && slices.Contains(e.Values, value) ||
				e.Operator == corev1.NodeSelectorOpDoesNotExist) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// checkDaemonSet checks one agent DaemonSet and returns its configuration,
// loaded as the agent would load it (nil when the ConfigMap is external).
func checkDaemonSet(t *testing.T, k kustomization, r rendered, ds *appsv1.DaemonSet, fencer bool) *config.Config {
	t.Helper()
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("DaemonSet %s: %s", ds.Name, fmt.Sprintf(format, args...))
	}
	spec := ds.Spec.Template.Spec

	// Identity: observers hold only the observer's RBAC.
	wantSA := observerSA
	if fencer {
		wantSA = fencerSA
	}
	if spec.ServiceAccountName != wantSA {
		errorf("serviceAccountName %q, want %q", spec.ServiceAccountName, wantSA)
	}

	// Gossip from the node's address, on every node whatever its taints.
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		errorf("hostNetwork %v dnsPolicy %q; want true, ClusterFirstWithHostNet", spec.HostNetwork, spec.DNSPolicy)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
	}) {
		errorf("no toleration {operator: Exists}: it would not run on tainted (NotReady, control-plane, out-of-service) nodes")
	}
	if spec.PriorityClassName != "system-node-critical" {
		errorf("priorityClassName %q, want system-node-critical", spec.PriorityClassName)
	}
	if !hasNodeExclusion(ds, "fenced.io/agent", "systemd") {
		errorf("does not avoid nodes labelled fenced.io/agent=systemd (which run the agent from systemd)")
	}
	if fencer && spec.NodeSelector[fencerLabel] != "true" {
		errorf("nodeSelector %v, want %s=true (a label kubelets cannot set themselves)", spec.NodeSelector, fencerLabel)
	}
	watchdog := ds.Name == watchdogDaemonSet
	if watchdog && spec.NodeSelector[watchdogLabel] != "true" {
		errorf("nodeSelector %v, want %s=true (a label kubelets cannot set themselves: the pod is privileged)", spec.NodeSelector, watchdogLabel)
	}

	// Unprivileged: uid 0, a user every host's system bus accepts, with no
	// capability (checked below on the container) — daemonset.yaml says why.
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		errorf("pod securityContext %+v: want runAsUser 0 (the host's system bus refuses users the host does not know) and seccomp RuntimeDefault", psc)
	}
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("DaemonSet %s: want exactly one container", ds.Name)
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case watchdog:
		// Privileged for its device (daemonset-watchdog.yaml says why), and
		// nothing else added.
		if sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			errorf("container securityContext %+v: want privileged (its watchdog device), readOnlyRootFilesystem, no capability added", sc)
		}
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Privileged != nil && *sc.Privileged ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		errorf("container securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, drop ALL, add none", sc)
	}
	var watchdogDevice string
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[res]; !ok {
			errorf("no %s request", res)
		}
		if _, ok := c.Resources.Limits[res]; !ok {
			errorf("no %s limit", res)
		}
	}
	if c.Image == "" {
		errorf("no image")
	}

	// Flags and environment.
	if len(c.Args) == 0 || c.Args[0] != "agent" || len(c.Command) > 0 {
		errorf("command %v args %v; want the image's entrypoint with args [agent …]", c.Command, c.Args)
	}
	flag := func(name string) string {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
		return ""
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		errorf("no env NODE_NAME from spec.nodeName")
	}

	// Volumes by mount path.
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	mountOf := func(p string) (corev1.VolumeMount, corev1.Volume, bool) {
		for _, m := range c.VolumeMounts {
			if p == m.MountPath || strings.HasPrefix(p, m.MountPath+"/") {
				return m, volumes[m.Name], true
			}
		}
		return corev1.VolumeMount{}, corev1.Volume{}, false
	}
	for _, m := range c.VolumeMounts {
		if v := volumes[m.Name]; watchdog && v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathCharDev {
			// The watchdog device, opened for writing, at its host path.
			if v.HostPath.Path != m.MountPath || m.SubPath != "" || watchdogDevice != "" {
				errorf("watchdog device %s mounted at %s (subPath %q): want one device, at its host path", v.HostPath.Path, m.MountPath, m.SubPath)
			}
			watchdogDevice = m.MountPath
			continue
		}
		if !m.ReadOnly || m.SubPath != "" {
			errorf("volume mount %s: readOnly %v subPath %q; want read-only, no subPath (a subPath never sees a rotated Secret)", m.MountPath, m.ReadOnly, m.SubPath)
		}
		v := volumes[m.Name]
		switch {
		case v.Secret != nil:
			ref := "Secret/" + v.Secret.SecretName
			if _, ok := r.secrets[v.Secret.SecretName]; !ok && !slices.Contains(k.external, ref) {
				errorf("mounts %s, which the render lacks", ref)
			}
			if !fencer && v.Secret.SecretName != "fenced-gossip-key" {
				errorf("an observer mounts Secret %s: only fencers hold BMC credentials", v.Secret.SecretName)
			}
		case v.ConfigMap != nil:
			ref := "ConfigMap/" + v.ConfigMap.Name
			if _, ok := r.configMaps[v.ConfigMap.Name]; !ok && !slices.Contains(k.external, ref) {
				errorf("mounts %s, which the render lacks", ref)
			}
		case v.HostPath != nil:
			switch v.HostPath.Path {
			case "/proc/sys/kernel/random/boot_id", "/run/dbus":
			case shutdown.DefaultKubeletRootDir:
				// Without propagation the agent would see the CSI mounts
				// as they were at its start, and never see them go.
				if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
					errorf("hostPath %s mounted without mountPropagation: HostToContainer", v.HostPath.Path)
				}
			default:
				errorf("hostPath %s: the agent needs the boot ID, the D-Bus system bus and the kubelet directory, nothing else of the host", v.HostPath.Path)
			}
		default:
			errorf("volume %s of an unexpected type", m.Name)
		}
	}

	// The boot ID: the host's file, read-only, where --boot-id-file says.
	bootID := flag("boot-id-file")
	if m, v, ok := mountOf(bootID); !ok || m.MountPath != bootID || v.HostPath == nil ||
		v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathFile {
		errorf("--boot-id-file=%q is not a hostPath File mount of the host's boot ID", bootID)
	}

	// Clean-shutdown announcements: logind's bus at its standard path, and
	// the kubelet directory where --kubelet-root-dir says (its default).
	root := flag("kubelet-root-dir")
	if root == "" {
		root = shutdown.DefaultKubeletRootDir
	}
	if m, v, ok := mountOf(root); !ok || m.MountPath != root || v.HostPath == nil || v.HostPath.Path != root {
		errorf("the kubelet directory %s is not mounted from the host at the same path", root)
	}
	if _, v, ok := mountOf("/run/dbus/system_bus_socket"); !ok || v.HostPath == nil || v.HostPath.Path != "/run/dbus" {
		errorf("the host's D-Bus system bus (/run/dbus) is not mounted: no clean-shutdown announcements")
	}

	// Probes on the metrics port.
	ports := map[string]corev1.ContainerPort{}
	for _, p := range c.Ports {
		ports[p.Name] = p
	}
	probe := func(kind string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path ||
			!(p.HTTPGet.Port == intstr.FromString("metrics") || p.HTTPGet.Port == intstr.FromInt32(9740)) {
			errorf("%s probe %+v; want GET %s on the metrics port", kind, p, path)
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz")
	if ports["metrics"].ContainerPort != 9740 {
		errorf("metrics port %d, want 9740 (the agent's --metrics-address default)", ports["metrics"].ContainerPort)
	}

	// The configuration, as the agent will load it.
	cfgPath := flag("config")
	m, v, ok := mountOf(cfgPath)
	if !ok || v.ConfigMap == nil || filepath.Dir(cfgPath) != m.MountPath {
		errorf("--config=%q is not a file of a mounted ConfigMap", cfgPath)
		return nil
	}
	cm, ok := r.configMaps[v.ConfigMap.Name]
	if !ok {
		return nil // external: created by run-power-loss.sh
	}
	data, ok := cm.Data[filepath.Base(cfgPath)]
	if !ok {
		errorf("ConfigMap %s has no key %s", cm.Name, filepath.Base(cfgPath))
		return nil
	}
	bmcSecret := ""
	if bm, bv, ok := mountOf(bmcDir + "/x"); ok && bm.MountPath == bmcDir && bv.Secret != nil {
		bmcSecret = bv.Secret.SecretName
	}
	var has func(string) bool
	if s, ok := r.secrets[bmcSecret]; ok {
		has = func(key string) bool { _, in := s.StringData[key]; _, in2 := s.Data[key]; return in || in2 }
	} else if bmcSecret == "" {
		has = func(string) bool { return false } // nothing mounted there
		if fencer {
			errorf("no Secret mounted at %s, where the BMC password files are expected", bmcDir)
		}
	}
	cfg, err := loadConfig(t, []byte(data), "ConfigMap "+cm.Name, bmcDir, has)
	if err != nil {
		errorf("its configuration does not load: %v", err)
		return nil
	}
	if fencer != (len(cfg.BMCs) > 0) {
		errorf("%d BMCs in its config: a fencer needs the inventory, an observer must not have it", len(cfg.BMCs))
	}
	if watchdog && (watchdogDevice == "" || cfg.Watchdog.Device != watchdogDevice) {
		errorf("watchdog.device %q, but the device mounted is %q", cfg.Watchdog.Device, watchdogDevice)
	}
	if cfg.Gossip.Port != int(ports["gossip-tcp"].ContainerPort) || cfg.Gossip.Port != int(ports["gossip-udp"].ContainerPort) ||
		ports["gossip-tcp"].Protocol != corev1.ProtocolTCP || ports["gossip-udp"].Protocol != corev1.ProtocolUDP {
		errorf("gossip.port %d, but the container declares %+v", cfg.Gossip.Port, c.Ports)
	}
	// The gossip keys: a mounted Secret's key (keyFile), or the Secret
	// mounted whole (keyDir), whose key "key" is the primary.
	field, keyFile := "gossip.keyFile", cfg.Gossip.KeyFile
	if cfg.Gossip.KeyDir != "" {
		field, keyFile = "gossip.keyDir", cfg.Gossip.KeyDir+"/key"
	}
	if km, kv, ok := mountOf(keyFile); !ok || kv.Secret == nil || filepath.Dir(keyFile) != km.MountPath {
		errorf("%s %q is not a mounted Secret's", field, keyFile)
	} else if s, ok := r.secrets[kv.Secret.SecretName]; ok {
		key := filepath.Base(keyFile)
		if _, in := s.StringData[key]; !in {
			if _, in := s.Data[key]; !in {
				errorf("Secret %s has no key %s (%s)", s.Name, key, field)
			}
		}
	}
	return cfg
}

// TestPolicyFollowsNamespace: an overlay that moves fenced to another
// namespace moves the agent identity policy's binding with it
// (base/kustomizeconfig.yaml), along with the Namespace object, the Roles
// and their ServiceAccount subjects. Without that, the policy would guard
// a namespace where no key Lease is written and leave the real one open.
// The fencer's Role and RoleBinding on the kubelets' Leases stay in
// kube-node-lease (base/kube-node-lease, which the overlay lists as the
// README says), their subject the fencer of the overlay's namespace.
func TestPolicyFollowsNamespace(t *testing.T) {
	kubectl := kubectlPath(t)
	const other = "fenced-elsewhere"
	dir := t.TempDir()
	// kustomize refuses absolute paths for bases.
	baseDir, err := filepath.Rel(dir, path(t, "deploy/daemonset/base"))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\nresources:\n  - %s\n"+
		"transformers:\n  - %s\n", other, baseDir, filepath.Join(baseDir, filepath.Base(kubeNodeLeaseDir)))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := run(t, nil, kubectl, "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, stderr)
	}
	var binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	var namespaces []string
	roles, roleBindings := map[string]string{}, map[string]string{}
	for _, o := range decodeObjects(t, "kubectl kustomize (overlay with namespace "+other+")", []byte(out)) {
		switch o := o.(type) {
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			binding = o
		case *corev1.Namespace:
			namespaces = append(namespaces, o.Name)
		case *rbacv1.Role:
			roles[o.Name] = o.Namespace
		case *rbacv1.RoleBinding:
			roleBindings[o.Name] = o.Namespace
			for _, s := range o.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind && s.Namespace != other {
					t.Errorf("RoleBinding %s: subject %s in namespace %q, want %s", o.Name, s.Name, s.Namespace, other)
				}
			}
		}
	}
	if ns := policyNamespace(binding); ns != other {
		t.Errorf("binding %s covers namespace %q, want %s", publish.PolicyName, ns, other)
	}
	if !slices.Equal(namespaces, []string{other}) {
		t.Errorf("Namespace objects %v, want [%s]", namespaces, other)
	}
	for r, want := range map[string]string{leaseRole: other, agentLeaseRole: other, kubeletLeaseRole: fencing.KubeletLeaseNamespace, operatorRole: other} {
		if roles[r] != want {
			t.Errorf("Role %s in namespace %q, want %s", r, roles[r], want)
		}
		if r == operatorRole {
			continue // bound to nobody
		}
		if roleBindings[r] != want {
			t.Errorf("RoleBinding %s in namespace %q, want %s", r, roleBindings[r], want)
		}
	}
}
