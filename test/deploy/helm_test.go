package deploy

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/heartbeat"
)

// chartDir is the Helm chart, relative to the repository root.
const chartDir = "deploy/helm/fenced"

// helmPath returns the pinned helm (cluster.HelmModule), installed once
// into fenced's cache beside the Kubernetes binaries (outside the
// repository; minutes the first time).
func helmPath(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds helm from the Go module proxy (minutes the first time); skipped with -short")
	}
	helm, err := cluster.InstallTool(cluster.HelmModule)
	if err != nil {
		t.Fatal(err)
	}
	return helm
}

// helmTemplate renders the chart in the agents' namespace with values (a
// YAML document, may be empty); it returns the output, or the error with
// helm's message.
func helmTemplate(t *testing.T, helm, values string) (string, error) {
	t.Helper()
	args := []string{"template", "fenced", path(t, chartDir), "--namespace", namespace, "--kube-version", cluster.KubeVersion()}
	if values != "" {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values", f)
	}
	stdout, stderr, err := run(t, nil, helm, args...)
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, stderr)
	}
	return stdout, nil
}

// allOptions turns every option of the chart on, with the fencer
// configuration of overlays/in-cluster-fencers split as the chart takes it:
// the cluster's settings under cluster:, the rest under fencers:.
func allOptions(t *testing.T) string {
	t.Helper()
	var fencerConfig map[string]any
	if err := yaml.Unmarshal(readFile(t, "deploy/daemonset/overlays/in-cluster-fencers/fencer-config.yaml"), &fencerConfig); err != nil {
		t.Fatal(err)
	}
	// The release namespace is the lease namespace.
	delete(fencerConfig["fencer"].(map[string]any), "leaseNamespace")
	gossip := fencerConfig["gossip"].(map[string]any)
	delete(gossip, "keyDir")
	values := map[string]any{
		"global":           map[string]any{"imagePullSecrets": []any{"global-pull"}},
		"image":            map[string]any{"repository": "registry.example/fenced", "tag": "v9.9.9"},
		"imagePullSecrets": []any{map[string]any{"name": "pull"}},
		"cluster":          map[string]any{"name": fencerConfig["clusterName"], "gossip": gossip, "shutdown": map[string]any{"announce": true}},
		"metrics": map[string]any{"port": 9741, "service": map[string]any{"enabled": true},
			"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}}},
		"podAnnotations": map[string]any{"example.com/a": "b"},
		"podLabels":      map[string]any{"example.com/team": "storage"},
		"extraArgs":      []any{"--log-level=debug"},
		"extraEnv":       []any{map[string]any{"name": "GODEBUG", "value": "madvdontneed=1"}},
		"fencers": map[string]any{"enabled": true, "image": map[string]any{"repository": "registry.example/fenced-fence-agents", "tag": "v9.9.9"},
			"policy": fencerConfig["policy"], "fencer": fencerConfig["fencer"], "bmc": fencerConfig["bmc"]},
		"deleteStaleVolumeAttachments": true,
		"prometheusRule":               map[string]any{"enabled": true},
		"watchdog":                     map[string]any{"enabled": true, "config": map[string]any{"device": "/dev/watchdog1", "confirm": "45s"}},
	}
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHelmChart: `helm lint --strict` is clean with the default values and
// with every option on; the default render holds the same objects as the
// kustomize base (Helm's own labels and the ConfigMap's hash suffix aside);
// with every option on, the configurations load as the agent loads them,
// the fencer mounts its credentials, observers keep off fencer nodes and
// the PrometheusRule holds the rule file's groups; bad values are refused
// with a message that names them.
func TestHelmChart(t *testing.T) {
	helm := helmPath(t)
	kubectl := kubectlPath(t)
	all := allOptions(t)

	t.Run("lint", func(t *testing.T) {
		for name, values := range map[string]string{"defaults": "", "every option": all} {
			args := []string{"lint", "--strict", path(t, chartDir)}
			if values != "" {
				f := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--values", f)
			}
			if stdout, stderr, err := run(t, nil, helm, args...); err != nil {
				t.Errorf("helm lint (%s): %v\n%s%s", name, err, stdout, stderr)
			}
		}
	})

	// The defaults render the base but its Namespace (helm install needs
	// the namespace before it renders: the README has it made first);
	// namespace.create adds that too.
	t.Run("defaults render the kustomize base", func(t *testing.T) {
		out, err := helmTemplate(t, helm, "")
		if err != nil {
			t.Fatal(err)
		}
		withNamespace, err := helmTemplate(t, helm, "namespace:\n  create: true\n")
		if err != nil {
			t.Fatal(err)
		}
		decodeObjects(t, "helm template", []byte(withNamespace)) // strict: no unknown or duplicate field
		base, _ := render(t, kubectl, "deploy/daemonset/base")
		got, want := comparable(t, withNamespace), comparable(t, string(base))
		defaults := comparable(t, out)
		if len(defaults) != len(got)-1 || defaults["Namespace//"+namespace] != nil {
			t.Errorf("the defaults render %d objects, namespace.create %d: want the same but the Namespace", len(defaults), len(got))
		}
		for key, w := range want {
			g, ok := got[key]
			if !ok {
				t.Errorf("%s: in the kustomize base, not in the chart's render", key)
				continue
			}
			if !reflect.DeepEqual(g, w) {
				gb, _ := yaml.Marshal(g)
				wb, _ := yaml.Marshal(w)
				t.Errorf("%s differs:\n--- chart\n%s\n--- kustomize base\n%s", key, gb, wb)
			}
		}
		for key := range got {
			if _, ok := want[key]; !ok {
				t.Errorf("%s: in the chart's render, not in the kustomize base", key)
			}
		}
		t.Logf("%d objects, the same in both", len(want))
	})

	t.Run("every option", func(t *testing.T) {
		out, err := helmTemplate(t, helm, all)
		if err != nil {
			t.Fatal(err)
		}
		objs := comparable(t, out)
		for _, key := range []string{"DaemonSet/fenced-system/fenced-fencer",
			"ConfigMap/fenced-system/fenced-fencer-config", "ClusterRole//fenced-fencer-delete-stale-volumeattachments",
			"DaemonSet/fenced-system/" + watchdogDaemonSet, "ConfigMap/fenced-system/fenced-watchdog-config",
			"Service/fenced-system/fenced-metrics", "ServiceMonitor/fenced-system/fenced", "PrometheusRule/fenced-system/fenced"} {
			if objs[key] == nil {
				t.Errorf("no %s", key)
			}
		}
		// The configurations load as the agent loads them; only the
		// watchdog agents arm, the device their pods mount.
		for _, cm := range []string{"fenced-observer-config", "fenced-fencer-config", "fenced-watchdog-config"} {
			data, err := yaml.Marshal(get(objs["ConfigMap/fenced-system/"+cm], "data", "config.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := loadConfig(t, data, cm, "/etc/fenced/bmc", nil)
			if err != nil {
				t.Errorf("%s does not load: %v", cm, err)
			} else if cm == "fenced-fencer-config" && cfg.Fencer.LeaseNamespace != namespace {
				t.Errorf("fencer lease namespace %q, want the release namespace %s", cfg.Fencer.LeaseNamespace, namespace)
			} else if arms := cfg.ArmsWatchdog("w-1"); arms != (cm == "fenced-watchdog-config") || cfg.Watchdog.Confirm != 45*time.Second && cm != "fenced-observer-config" {
				t.Errorf("%s: arms a watchdog %v, watchdog section %+v", cm, arms, cfg.Watchdog)
			}
		}
		wd := fmt.Sprint(objs["DaemonSet/fenced-system/"+watchdogDaemonSet])
		for _, want := range []string{"privileged:true", "path:/dev/watchdog1 type:CharDevice", "mountPath:/dev/watchdog1", "serviceAccountName:fenced-observer",
			watchdogLabel + ":true", "key:" + fencerLabel + " operator:NotIn", "name:fenced-watchdog-config"} {
			if !strings.Contains(wd, want) {
				t.Errorf("the watchdog DaemonSet lacks %s", want)
			}
		}
		for _, other := range []string{"fenced-observer", "fenced-fencer"} {
			if ds := fmt.Sprint(objs["DaemonSet/fenced-system/"+other]); !strings.Contains(ds, "key:"+watchdogLabel+" operator:NotIn") || strings.Contains(ds, "privileged") {
				t.Errorf("%s does not keep off watchdog nodes, or is privileged", other)
			}
		}
		ds := fmt.Sprint(objs["DaemonSet/fenced-system/fenced-fencer"])
		for _, want := range []string{"secretName:fenced-bmc", "mountPath:/etc/fenced/bmc", "image:registry.example/fenced-fence-agents:v9.9.9",
			"node-restriction.kubernetes.io/fenced-fencer:true", "--log-level=debug", "name:GODEBUG", "name:global-pull", "name:pull",
			"example.com/team:storage", "example.com/a:b", "containerPort:9741", "--metrics-address=:9741"} {
			if !strings.Contains(ds, want) {
				t.Errorf("the fencer DaemonSet lacks %s", want)
			}
		}
		if obs := fmt.Sprint(objs["DaemonSet/fenced-system/fenced-observer"]); !strings.Contains(obs, "key:node-restriction.kubernetes.io/fenced-fencer operator:NotIn") {
			t.Error("observers do not keep off fencer nodes")
		} else if !strings.Contains(obs, "image:registry.example/fenced:v9.9.9") {
			t.Error("observers do not run image.repository:image.tag")
		}
		if sm := fmt.Sprint(objs["ServiceMonitor/fenced-system/fenced"]); !strings.Contains(sm, "release:prom") {
			t.Error("the ServiceMonitor lacks metrics.serviceMonitor.labels")
		}
		if svc := fmt.Sprint(objs["Service/fenced-system/fenced-metrics"]); !strings.Contains(svc, "port:9741") {
			t.Error("the metrics Service is not on metrics.port")
		}
		var rules map[string]any
		if err := yaml.Unmarshal(readFile(t, "deploy/monitoring/prometheus-rules.yaml"), &rules); err != nil {
			t.Fatal(err)
		}
		if spec := get(objs["PrometheusRule/fenced-system/fenced"], "spec"); !reflect.DeepEqual(spec, rules) {
			t.Error("the PrometheusRule's spec is not deploy/monitoring/prometheus-rules.yaml")
		}
	})

	// What the chart renders, the API server accepts as a cluster would
	// (admission, defaulting, strict field validation), but the
	// prometheus-operator kinds, whose CRDs the harness lacks (their
	// content: promtool and the check above).
	t.Run("server-side dry run", func(t *testing.T) {
		ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true})
		if _, err := c.CreateNamespace(ctx, namespace); err != nil {
			t.Fatal(err)
		}
		for name, values := range map[string]string{"defaults": "", "every option": all} {
			out, err := helmTemplate(t, helm, values)
			if err != nil {
				t.Fatal(err)
			}
			var docs []string
			for _, doc := range splitDocs(t, []byte(out)) {
				if !strings.Contains(string(doc), "apiVersion: monitoring.coreos.com/") {
					docs = append(docs, string(doc))
				}
			}
			stdout, stderr, err := run(t, []byte(strings.Join(docs, "\n---\n")), kubectl, "--kubeconfig", c.Kubeconfig,
				"apply", "--dry-run=server", "--validate=strict", "-f", "-")
			if err != nil {
				t.Errorf("%s: kubectl apply --dry-run=server: %v\n%s%s", name, err, stdout, stderr)
			}
		}
	})

	t.Run("bad values are refused", func(t *testing.T) {
		for values, says := range map[string]string{
			"fencers:\n  enabled: true\n":       "fencers.enabled needs an inventory",
			"fencer:\n  enabled: true\n":        "additional properties 'fencer' not allowed",
			"image:\n  pullPolicy: Sometimes\n": "pullPolicy",
		} {
			if _, err := helmTemplate(t, helm, values); err == nil || !strings.Contains(err.Error(), says) {
				t.Errorf("values %q: %v; want an error saying %q", values, err, says)
			}
		}
	})
}

// TestHelmChartRules: the chart's copy of the alert rules is the rule file.
func TestHelmChartRules(t *testing.T) {
	if got, want := readFile(t, chartDir, "files", "prometheus-rules.yaml"), readFile(t, "deploy", "monitoring", "prometheus-rules.yaml"); string(got) != string(want) {
		t.Fatalf("%s/files/prometheus-rules.yaml differs from deploy/monitoring/prometheus-rules.yaml: cp deploy/monitoring/prometheus-rules.yaml %s/files/", chartDir, chartDir)
	}
}

// helmLabels are the labels the chart adds to what the kustomize base has.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// clusterScoped are the cluster-scoped kinds the renders hold.
var clusterScoped = map[string]bool{"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}

// configMapHash is the suffix kustomize's configMapGenerator adds.
var configMapHash = regexp.MustCompile(`^(fenced-(observer|fencer)-config)-[a-z0-9]{10}$`)

// comparable decodes a render into objects keyed Kind/namespace/name, with
// what only one of the two tools writes taken out: Helm's labels, the
// ConfigMap hash suffix and the chart's config checksum; configuration
// files parsed, so that comments and layout do not count.
func comparable(t *testing.T, render string) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	for _, doc := range splitDocs(t, []byte(render)) {
		var o map[string]any
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatal(err)
		}
		normalize(o)
		md := o["metadata"].(map[string]any)
		if clusterScoped[fmt.Sprint(o["kind"])] {
			// kustomize's namespace: sets it on kinds it does not know to
			// be cluster-scoped; the API server ignores it there.
			delete(md, "namespace")
		}
		ns, _ := md["namespace"].(string)
		objs[fmt.Sprintf("%s/%s/%s", o["kind"], ns, md["name"])] = o
	}
	return objs
}

func normalize(v any) {
	switch x := v.(type) {
	case map[string]any:
		if labels, ok := x["labels"].(map[string]any); ok {
			for _, l := range helmLabels {
				delete(labels, l)
			}
		}
		if ann, ok := x["annotations"].(map[string]any); ok {
			delete(ann, "fenced.io/config-checksum")
			if len(ann) == 0 {
				delete(x, "annotations")
			}
		}
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "name") {
				x[k] = configMapHash.ReplaceAllString(s, "$1")
			}
			if s, ok := e.(string); ok && k == "config.yaml" {
				var parsed any
				if err := yaml.Unmarshal([]byte(s), &parsed); err == nil {
					x[k] = parsed
				}
			}
			normalize(e)
		}
	case []any:
		for _, e := range x {
			normalize(e)
		}
	}
}

// get walks nested maps by keys (nil when a key is missing).
func get(o map[string]any, keys ...string) any {
	var v any = o
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// readmeValues is the values file the README's install shows.
func readmeValues(t *testing.T) string {
	t.Helper()
	values, err := cluster.ReadmeHelmValues()
	if err != nil {
		t.Fatal(err)
	}
	return values
}

// agentConfigs renders the chart with values and returns each DaemonSet
// (by role) with the configuration it mounts, loaded as the agent loads it.
func agentConfigs(t *testing.T, helm, values string) map[string]struct {
	ds  *appsv1.DaemonSet
	cfg *config.Config
} {
	t.Helper()
	out, err := helmTemplate(t, helm, values)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, values)
	}
	cms := map[string]*corev1.ConfigMap{}
	dss := map[string]*appsv1.DaemonSet{}
	for _, o := range decodeObjects(t, "helm template", []byte(out)) {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			cms[o.Name] = o
		case *appsv1.DaemonSet:
			dss[o.Labels["app.kubernetes.io/component"]] = o
		}
	}
	agents := map[string]struct {
		ds  *appsv1.DaemonSet
		cfg *config.Config
	}{}
	for role, ds := range dss {
		var cmName string
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil {
				cmName = v.ConfigMap.Name
			}
		}
		cm := cms[cmName]
		if cm == nil {
			t.Fatalf("DaemonSet %s mounts ConfigMap %q, which the render lacks", ds.Name, cmName)
		}
		cfg, err := loadConfig(t, []byte(cm.Data["config.yaml"]), "ConfigMap "+cm.Name, "/etc/fenced/bmc", nil)
		if err != nil {
			t.Fatalf("the %s configuration does not load: %v", role, err)
		}
		agents[role] = struct {
			ds  *appsv1.DaemonSet
			cfg *config.Config
		}{ds, cfg}
	}
	return agents
}

// TestREADMEValuesFormOneRing: the values the README's install shows render,
// in dry-run, into observers and fencers of one ring: the same cluster
// name, gossip port and key Secret in both configurations, each DaemonSet
// declaring its configuration's gossip port. (The old chart took two free-form
// configurations: the README's set no clusterName, config.example.yaml's
// "prod" went into the fencers' only, and the rings never merged; its
// containerPorts stayed 7946 whatever the configuration said.)
func TestREADMEValuesFormOneRing(t *testing.T) {
	helm := helmPath(t)
	agents := agentConfigs(t, helm, readmeValues(t))
	obs, fen := agents["observer"], agents["fencer"]
	if obs.cfg == nil || fen.cfg == nil {
		t.Fatalf("the README's values render DaemonSets %v: want an observer and a fencer", slices.Sorted(maps.Keys(agents)))
	}
	if obs.cfg.ClusterName == "" || obs.cfg.ClusterName != fen.cfg.ClusterName {
		t.Errorf("cluster names %q (observers) and %q (fencers): want the same, set", obs.cfg.ClusterName, fen.cfg.ClusterName)
	}
	if obs.cfg.Gossip.Port != fen.cfg.Gossip.Port || obs.cfg.Gossip.KeyFile != fen.cfg.Gossip.KeyFile || obs.cfg.Gossip.Profile != fen.cfg.Gossip.Profile {
		t.Errorf("gossip %+v (observers) and %+v (fencers): want the same", obs.cfg.Gossip, fen.cfg.Gossip)
	}
	if obs.cfg.Gossip.Port == 7946 {
		t.Error("the README's ring gossips on 7946, MetalLB's speakers' port")
	}
	secrets := map[string]string{}
	for role, a := range agents {
		for _, p := range a.ds.Spec.Template.Spec.Containers[0].Ports {
			if strings.HasPrefix(p.Name, "gossip-") && int(p.ContainerPort) != a.cfg.Gossip.Port {
				t.Errorf("the %s DaemonSet declares %s %d, its configuration gossips on %d", role, p.Name, p.ContainerPort, a.cfg.Gossip.Port)
			}
		}
		for _, v := range a.ds.Spec.Template.Spec.Volumes {
			if v.Name == "gossip-key" && v.Secret != nil {
				secrets[role] = v.Secret.SecretName
			}
		}
	}
	if secrets["observer"] == "" || secrets["observer"] != secrets["fencer"] {
		t.Errorf("gossip key Secrets %v: want one, mounted by both", secrets)
	}
	if !fen.cfg.Policy.DryRun {
		t.Error("the README's install is not in dry-run: want fencers.policy.dryRun true")
	}
	if len(fen.cfg.BMCs) == 0 {
		t.Error("the README's fencer configuration has no BMC")
	}
	t.Logf("one ring: cluster %q, gossip port %d, key Secret %s", obs.cfg.ClusterName, obs.cfg.Gossip.Port, secrets["observer"])
}

// TestHelmChartRendersTheSame: the same values render the same bytes —
// no random key, nothing that Argo CD or Flux would see change on every
// sync. (The old chart's gossipKey.create, which the README told users to
// set, made a new key on every render.)
func TestHelmChartRendersTheSame(t *testing.T) {
	helm := helmPath(t)
	for name, values := range map[string]string{"defaults": "", "every option": allOptions(t), "the README's": readmeValues(t)} {
		first, err := helmTemplate(t, helm, values)
		if err != nil {
			t.Fatal(err)
		}
		second, err := helmTemplate(t, helm, values)
		if err != nil {
			t.Fatal(err)
		}
		if first != second {
			t.Errorf("%s: two renders differ", name)
		}
	}
}

// TestDefaultGossipPort: the default gossip port is not memberlist's 7946,
// which MetalLB's speakers and Docker Swarm use on the host network, and
// the agent, the chart and the kustomize base agree on it. (The old default
// was 7946 everywhere.)
func TestDefaultGossipPort(t *testing.T) {
	if heartbeat.DefaultPort == 7946 {
		t.Fatal("heartbeat.DefaultPort is 7946, MetalLB's speakers' and Docker Swarm's gossip port")
	}
	var values struct {
		Cluster struct {
			Gossip struct {
				Port int `json:"port"`
			} `json:"gossip"`
		} `json:"cluster"`
	}
	if err := yaml.Unmarshal(readFile(t, chartDir, "values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	if values.Cluster.Gossip.Port != heartbeat.DefaultPort {
		t.Errorf("the chart's cluster.gossip.port is %d, the agent's default %d", values.Cluster.Gossip.Port, heartbeat.DefaultPort)
	}
	cfg, err := config.Parse(readFile(t, "deploy/daemonset/base/observer-config.yaml"), "observer-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gossip.Port != heartbeat.DefaultPort {
		t.Errorf("the kustomize base gossips on %d, the agent's default is %d", cfg.Gossip.Port, heartbeat.DefaultPort)
	}
}

// TestHelmChartKeepsAnOldPortWhenAllowed: a ring that ran on the old
// default port 7946, on nodes where neither MetalLB nor Docker Swarm runs,
// keeps it through an upgrade by listing it in allowKnownPorts (the
// refusal's message says so), and both DaemonSets and their configurations
// carry it.
func TestHelmChartKeepsAnOldPortWhenAllowed(t *testing.T) {
	helm := helmPath(t)
	values := "allowKnownPorts: [7946]\ncluster:\n  name: prod\n  gossip: {port: 7946}\n" +
		"fencers:\n  enabled: true\n  bmc:\n    nodes: [{name: w-1, address: 10.0.0.1, protocol: ipmi, username: u, passwordFile: /etc/fenced/bmc/p}]\n"
	agents := agentConfigs(t, helm, values)
	for role, a := range agents {
		if a.cfg.Gossip.Port != 7946 {
			t.Errorf("the %s configuration gossips on %d; want 7946", role, a.cfg.Gossip.Port)
		}
		for _, p := range a.ds.Spec.Template.Spec.Containers[0].Ports {
			if strings.HasPrefix(p.Name, "gossip-") && p.ContainerPort != 7946 {
				t.Errorf("the %s DaemonSet declares %s %d; want 7946", role, p.Name, p.ContainerPort)
			}
		}
	}
	if len(agents) != 2 {
		t.Errorf("rendered %d agent DaemonSets; want observers and fencers", len(agents))
	}
}

// TestHelmChartRefuses: values that would reach the cluster wrong fail at
// helm template, with a message that names the field: an inline password
// (the old chart rendered it into a ConfigMap, in etcd in clear, before the
// agent refused it), a misspelt key of the fencers' configuration (the old
// chart's free-form config passed it on), a port a known component owns
// (the old chart hard-coded 7946 and ignored the configuration's port),
// the old gossipKey.create.
func TestHelmChartRefuses(t *testing.T) {
	helm := helmPath(t)
	const inventory = "fencers:\n  enabled: true\n  bmc:\n    nodes: [{name: w-1, address: 10.0.0.1, protocol: ipmi, username: u, passwordFile: /etc/fenced/bmc/p}]\n"
	for _, tc := range []struct {
		name, values string
		says         []string
	}{
		{"inline BMC password in defaults", inventory + "    defaults: {password: hunter2}\n", []string{"/fencers/bmc/defaults", "'password' not allowed"}},
		{"inline BMC password on a node", "fencers:\n  enabled: true\n  bmc:\n    nodes: [{name: w-1, address: 10.0.0.1, password: hunter2}]\n",
			[]string{"/fencers/bmc/nodes/0", "'password' not allowed"}},
		{"inline fence agent password", inventory + "  fenceDevices: [{name: pdu, agent: fence_apc, options: {ip: 10.0.0.9, password: hunter2}}]\n",
			[]string{"invalid propertyName 'password'"}},
		{"misspelt password field", inventory + "    defaults: {pasword: /etc/fenced/bmc/p}\n", []string{"'pasword' not allowed"}},
		{"misspelt cluster name", "cluster:\n  clustername: prod\n", []string{"'clustername' not allowed"}},
		{"misspelt policy field", inventory + "  policy: {dryrun: true}\n", []string{"/fencers/policy", "'dryrun' not allowed"}},
		{"lease namespace is the chart's", inventory + "  fencer: {leaseNamespace: elsewhere}\n", []string{"'leaseNamespace' not allowed"}},
		{"MetalLB's port", "cluster:\n  gossip: {port: 7946}\n", []string{"cluster.gossip.port: 7946", "MetalLB", "allowKnownPorts"}},
		{"only the listed known port is allowed", "allowKnownPorts: [7946]\ncluster:\n  gossip: {port: 9100}\n", []string{"cluster.gossip.port: 9100"}},
		{"an exporter's port", "cluster:\n  gossip: {port: 9100}\n", []string{"cluster.gossip.port: 9100", "node exporter"}},
		{"the kubelet's port", "metrics:\n  port: 10250\n", []string{"metrics.port: 10250", "kubelet"}},
		{"one port twice", "metrics:\n  port: 8946\n", []string{"cluster.gossip.port and metrics.port are both 8946"}},
		{"a key made at render time", "gossipKey:\n  create: true\n", []string{"'gossipKey' not allowed"}},
		{"a watchdog without a device", "watchdog:\n  enabled: true\n  config: {device: \"\"}\n", []string{"watchdog.enabled needs watchdog.config.device"}},
		{"a misspelt watchdog field", "watchdog:\n  enabled: true\n  config: {timout: 5s}\n", []string{"/watchdog/config", "'timout' not allowed"}},
		{"fencers with a topology but no inventory and no watchdog", "fencers:\n  enabled: true\n  topology: {defaults: [[watchdog]]}\n", []string{"fencers.enabled needs an inventory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplate(t, helm, tc.values)
			if err == nil {
				t.Fatalf("values %q render; want them refused", tc.values)
			}
			for _, want := range tc.says {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("values %q: %v; want a message saying %q", tc.values, err, want)
				}
			}
		})
	}
}

// TestHelmChartWatchdogOnly: a cluster with no power device at all — its
// fencers hold only a topology of watchdog levels — renders, and its
// fencers' configuration loads with every node on the level.
func TestHelmChartWatchdogOnly(t *testing.T) {
	helm := helmPath(t)
	out, err := helmTemplate(t, helm, "fencers:\n  enabled: true\n  topology: {defaults: [[watchdog]]}\nwatchdog:\n  enabled: true\n")
	if err != nil {
		t.Fatal(err)
	}
	objs := comparable(t, out)
	data, err := yaml.Marshal(get(objs["ConfigMap/fenced-system/fenced-fencer-config"], "data", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(t, data, "fenced-fencer-config", "/etc/fenced/bmc", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.CanFence() || cfg.WatchdogLevel("any-node") != 1 || cfg.Watchdog.Device != "/dev/watchdog0" {
		t.Errorf("fencers: can fence %v, watchdog level %d, section %+v", cfg.CanFence(), cfg.WatchdogLevel("any-node"), cfg.Watchdog)
	}
}

// TestHelmChartAsSubchart: a parent chart's globals pass the schema (the
// old schema refused global:, which Helm hands every subchart) and
// global.imageRegistry and global.imagePullSecrets reach the pods.
func TestHelmChartAsSubchart(t *testing.T) {
	helm := helmPath(t)
	parent := t.TempDir()
	if err := os.CopyFS(filepath.Join(parent, "charts", "fenced"), os.DirFS(path(t, chartDir))); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: platform\nversion: 1.0.0\ndependencies:\n  - name: fenced\n    version: \">=0.0.0\"\n",
		"values.yaml": "global:\n  imageRegistry: mirror.example:5000\n  imagePullSecrets: [{name: mirror}]\n" +
			"fenced:\n  cluster: {name: prod}\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(parent, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, err := run(t, nil, helm, "template", "platform", parent, "--namespace", namespace, "--kube-version", cluster.KubeVersion())
	if err != nil {
		t.Fatalf("helm template of a parent chart: %v\n%s", err, stderr)
	}
	var ds *appsv1.DaemonSet
	for _, o := range decodeObjects(t, "helm template (subchart)", []byte(stdout)) {
		if d, ok := o.(*appsv1.DaemonSet); ok && d.Name == "fenced-observer" {
			ds = d
		}
	}
	if ds == nil {
		t.Fatal("no observer DaemonSet")
	}
	spec := ds.Spec.Template.Spec
	if img := spec.Containers[0].Image; !strings.HasPrefix(img, "mirror.example:5000/fenced-io/fenced:") {
		t.Errorf("image %s: want it from global.imageRegistry mirror.example:5000", img)
	}
	if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "mirror" {
		t.Errorf("imagePullSecrets %v: want global.imagePullSecrets' mirror", spec.ImagePullSecrets)
	}
}
