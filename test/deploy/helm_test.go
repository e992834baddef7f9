package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"fenced.io/fenced/internal/testbed/cluster"
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
// configuration of overlays/in-cluster-fencers.
func allOptions(t *testing.T) string {
	t.Helper()
	var fencerConfig map[string]any
	if err := yaml.Unmarshal(readFile(t, "deploy/daemonset/overlays/in-cluster-fencers/fencer-config.yaml"), &fencerConfig); err != nil {
		t.Fatal(err)
	}
	// The release namespace is the lease namespace unless given.
	delete(fencerConfig["fencer"].(map[string]any), "leaseNamespace")
	values := map[string]any{
		"image":                        map[string]any{"repository": "registry.example/fenced", "tag": "v9.9.9"},
		"gossipKey":                    map[string]any{"create": true},
		"fencers":                      map[string]any{"enabled": true, "config": fencerConfig},
		"deleteStaleVolumeAttachments": true,
		"metrics":                      map[string]any{"service": map[string]any{"enabled": true}, "serviceMonitor": map[string]any{"enabled": true}},
		"prometheusRule":               map[string]any{"enabled": true},
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
		for _, key := range []string{"Secret/fenced-system/fenced-gossip-key", "DaemonSet/fenced-system/fenced-fencer",
			"ConfigMap/fenced-system/fenced-fencer-config", "ClusterRole//fenced-fencer-delete-stale-volumeattachments",
			"Service/fenced-system/fenced-metrics", "ServiceMonitor/fenced-system/fenced", "PrometheusRule/fenced-system/fenced"} {
			if objs[key] == nil {
				t.Errorf("no %s", key)
			}
		}
		// The configurations load as the agent loads them.
		for _, cm := range []string{"fenced-observer-config", "fenced-fencer-config"} {
			data, err := yaml.Marshal(get(objs["ConfigMap/fenced-system/"+cm], "data", "config.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := loadConfig(t, data, cm, "/etc/fenced/bmc", nil)
			if err != nil {
				t.Errorf("%s does not load: %v", cm, err)
			} else if cm == "fenced-fencer-config" && cfg.Fencer.LeaseNamespace != namespace {
				t.Errorf("fencer lease namespace %q, want the release namespace %s", cfg.Fencer.LeaseNamespace, namespace)
			}
		}
		ds := fmt.Sprint(objs["DaemonSet/fenced-system/fenced-fencer"])
		for _, want := range []string{"secretName:fenced-bmc", "mountPath:/etc/fenced/bmc", "image:registry.example/fenced:v9.9.9",
			"node-restriction.kubernetes.io/fenced-fencer:true"} {
			if !strings.Contains(ds, want) {
				t.Errorf("the fencer DaemonSet lacks %s", want)
			}
		}
		if obs := fmt.Sprint(objs["DaemonSet/fenced-system/fenced-observer"]); !strings.Contains(obs, "key:node-restriction.kubernetes.io/fenced-fencer operator:NotIn") {
			t.Error("observers do not keep off fencer nodes")
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
			"fencers:\n  enabled: true\n":       "fencers.enabled needs fencers.config",
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
