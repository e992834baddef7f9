package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// walk returns the files under dir (relative to the repository root) whose
// names end in one of the suffixes.
func walk(t *testing.T, dir string, suffixes ...string) []string {
	t.Helper()
	root := path(t, dir)
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		for _, s := range suffixes {
			if !d.IsDir() && strings.HasSuffix(p, s) {
				files = append(files, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no %v files under %s", suffixes, dir)
	}
	return files
}

func rel(t *testing.T, p string) string {
	r, err := filepath.Rel(repoRoot(t), p)
	if err != nil {
		return p
	}
	return r
}

// TestYAMLParses checks every YAML file of test/kind and deploy/daemonset:
// each document parses, names its apiVersion and kind, and — for the
// Kubernetes kinds client-go knows — decodes strictly (no unknown or
// duplicate field). The kind cluster config and the kustomize files are
// checked against their own minimal shape. CI has no Docker, so for
// test/kind this is all that runs (README.md there).
func TestYAMLParses(t *testing.T) {
	var files []string
	for _, dir := range []string{"test/kind", "deploy/daemonset"} {
		files = append(files, walk(t, dir, ".yaml", ".yml")...)
	}
	for _, f := range files {
		t.Run(rel(t, f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(f, "-config.yaml") && !strings.HasSuffix(f, "kind-config.yaml") {
				// A fenced configuration (a ConfigMap's content): loaded as
				// the agent would load it.
				if _, err := loadConfig(t, data, rel(t, f), bmcDir, nil); err != nil {
					t.Fatal(err)
				}
				return
			}
			if filepath.Base(f) == "kustomizeconfig.yaml" {
				// kustomize transformer configuration (a kustomization's
				// configurations:), which has no apiVersion or kind.
				checkTransformerConfig(t, data)
				return
			}
			for i, doc := range splitDocs(t, data) {
				var head struct {
					APIVersion string `json:"apiVersion"`
					Kind       string `json:"kind"`
				}
				if err := yaml.Unmarshal(doc, &head); err != nil || head.APIVersion == "" || head.Kind == "" {
					t.Fatalf("document %d: no apiVersion/kind (%v)", i, err)
				}
				gv, err := schema.ParseGroupVersion(head.APIVersion)
				if err != nil {
					t.Fatalf("document %d: apiVersion %q: %v", i, head.APIVersion, err)
				}
				if head.APIVersion == "builtin" {
					// A kustomize builtin transformer's configuration,
					// listed through a kustomization's transformers:.
					checkBuiltinTransformer(t, i, head.Kind, doc)
					continue
				}
				switch gv.Group {
				case "kustomize.config.k8s.io":
					checkKustomization(t, f, doc)
				case "kind.x-k8s.io":
					checkKindConfig(t, doc)
				case "monitoring.coreos.com":
					// The Prometheus Operator's kinds: the PrometheusRule of
					// components/monitoring, generated from the rule file
					// and checked against it (TestPrometheusRuleComponent).
					if head.Kind != "PrometheusRule" {
						t.Fatalf("document %d: %s %s: only PrometheusRule is expected", i, head.APIVersion, head.Kind)
					}
				default:
					if !scheme.Scheme.Recognizes(gv.WithKind(head.Kind)) {
						t.Fatalf("document %d: %s %s is not a kind client-go knows", i, head.APIVersion, head.Kind)
					}
					decodeObjects(t, rel(t, f), doc)
				}
			}
		})
	}
}

// checkKustomization: the file names are kustomization.yaml, and every file
// and directory it lists exists (kustomize would say so too, but only where
// kubectl is available; this runs with -short).
func checkKustomization(t *testing.T, file string, doc []byte) {
	t.Helper()
	if filepath.Base(file) != "kustomization.yaml" {
		t.Fatalf("a kustomize document outside kustomization.yaml")
	}
	var k struct {
		Resources          []string `json:"resources"`
		Components         []string `json:"components"`
		Configurations     []string `json:"configurations"`
		Transformers       []string `json:"transformers"`
		ConfigMapGenerator []struct {
			Files []string `json:"files"`
		} `json:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(doc, &k); err != nil {
		t.Fatal(err)
	}
	refs := append(append(append(append([]string{}, k.Resources...), k.Components...), k.Configurations...), k.Transformers...)
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			_, src, ok := strings.Cut(f, "=")
			if !ok {
				src = f
			}
			refs = append(refs, src)
		}
	}
	for _, r := range refs {
		if _, err := os.Stat(filepath.Join(filepath.Dir(file), r)); err != nil {
			t.Errorf("lists %s: %v", r, err)
		}
	}
}

// checkTransformerConfig: a kustomize transformer configuration holds field
// specs only (strictly: a misspelt key would be ignored by kustomize, and the
// field it was meant to rewrite left as it is), each with a kind and a path.
func checkTransformerConfig(t *testing.T, data []byte) {
	t.Helper()
	type fieldSpec struct {
		Group              string `json:"group"`
		Version            string `json:"version"`
		Kind               string `json:"kind"`
		Path               string `json:"path"`
		CreateIfNotPresent bool   `json:"create"`
	}
	var c map[string][]fieldSpec
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		t.Fatal(err)
	}
	if len(c) == 0 {
		t.Fatal("no field specs")
	}
	for name, specs := range c {
		for i, fs := range specs {
			if fs.Kind == "" || fs.Path == "" {
				t.Errorf("%s[%d]: want a kind and a path, got %+v", name, i, fs)
			}
		}
	}
}

// checkBuiltinTransformer: the configuration of a kustomize builtin
// PatchTransformer or ReplacementTransformer, strictly with the fields
// base/kube-node-lease uses (kustomize ignores a misspelt one, and the
// object it was meant to select or rewrite stays as it is), each with a
// target and something to do.
func checkBuiltinTransformer(t *testing.T, i int, kind string, doc []byte) {
	t.Helper()
	type selector struct {
		Group string `json:"group"`
		Kind  string `json:"kind"`
		Name  string `json:"name"`
	}
	type meta struct {
		Name string `json:"name"`
	}
	switch kind {
	case "PatchTransformer":
		var c struct {
			APIVersion string   `json:"apiVersion"`
			Kind       string   `json:"kind"`
			Metadata   meta     `json:"metadata"`
			Target     selector `json:"target"`
			Patch      string   `json:"patch"`
		}
		if err := yaml.UnmarshalStrict(doc, &c); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var ops []struct {
			Op    string `json:"op"`
			Path  string `json:"path"`
			Value any    `json:"value"`
		}
		if err := yaml.UnmarshalStrict([]byte(c.Patch), &ops); err != nil || len(ops) == 0 {
			t.Errorf("document %d: patch is not a JSON patch (%v): %q", i, err, c.Patch)
		}
		if c.Metadata.Name == "" || c.Target.Kind == "" || c.Target.Name == "" {
			t.Errorf("document %d: want a name and a target kind and name, got %+v", i, c)
		}
	case "ReplacementTransformer":
		var c struct {
			APIVersion   string `json:"apiVersion"`
			Kind         string `json:"kind"`
			Metadata     meta   `json:"metadata"`
			Replacements []struct {
				Source struct {
					Kind      string `json:"kind"`
					Name      string `json:"name"`
					FieldPath string `json:"fieldPath"`
				} `json:"source"`
				Targets []struct {
					Select     selector `json:"select"`
					FieldPaths []string `json:"fieldPaths"`
				} `json:"targets"`
			} `json:"replacements"`
		}
		if err := yaml.UnmarshalStrict(doc, &c); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if c.Metadata.Name == "" || len(c.Replacements) == 0 {
			t.Errorf("document %d: want a name and replacements, got %+v", i, c)
		}
		for _, r := range c.Replacements {
			if r.Source.Kind == "" || r.Source.Name == "" || r.Source.FieldPath == "" || len(r.Targets) == 0 {
				t.Errorf("document %d: replacement %+v: want a source kind, name and fieldPath, and targets", i, r)
			}
			for _, tg := range r.Targets {
				if tg.Select.Kind == "" || tg.Select.Name == "" || len(tg.FieldPaths) == 0 {
					t.Errorf("document %d: target %+v: want a kind, a name and field paths", i, tg)
				}
			}
		}
	default:
		t.Errorf("document %d: builtin %s: not a transformer this test knows", i, kind)
	}
}

// checkKindConfig: the shape run-power-loss.sh and its README rely on.
func checkKindConfig(t *testing.T, doc []byte) {
	t.Helper()
	var c struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Name       string `json:"name"`
		Nodes      []struct {
			Role        string `json:"role"`
			ExtraMounts []struct {
				HostPath      string `json:"hostPath"`
				ContainerPath string `json:"containerPath"`
			} `json:"extraMounts"`
		} `json:"nodes"`
	}
	// Strict on purpose (the fields this file uses, no others): kind
	// ignores a misspelt field.
	if err := yaml.UnmarshalStrict(doc, &c); err != nil {
		t.Fatal(err)
	}
	roles := map[string]int{}
	for _, n := range c.Nodes {
		roles[n.Role]++
		if n.Role == "worker" && (len(n.ExtraMounts) != 1 || n.ExtraMounts[0].ContainerPath != "/var/fenced-shared") {
			t.Errorf("worker without the shared mount at /var/fenced-shared (workload.yaml's volume): %+v", n.ExtraMounts)
		}
	}
	if c.Kind != "Cluster" || roles["control-plane"] != 1 || roles["worker"] != 3 || len(c.Nodes) != 4 {
		t.Errorf("kind config: kind %q, nodes by role %v; want a Cluster of 1 control-plane and 3 workers", c.Kind, roles)
	}
}

// TestScriptsParse runs `bash -n` on every script of test/kind (the
// scenario cannot run here) and checks they are executable, as the README
// invokes them.
func TestScriptsParse(t *testing.T) {
	for _, f := range walk(t, "test/kind", ".sh") {
		t.Run(rel(t, f), func(t *testing.T) {
			if _, stderr, err := run(t, nil, "bash", "-n", f); err != nil {
				t.Fatalf("bash -n: %v\n%s", err, stderr)
			}
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o111 == 0 {
				t.Errorf("not executable (chmod +x): mode %v", fi.Mode())
			}
		})
	}
}

// TestNoMergeLeftovers: no tracked file holds a merge's conflict markers
// or is a merge tool's leftover (.orig, .rej). docs/configuration.md once
// carried both sides of a conflict, and pkg/fencing/core a hold.go.orig.
func TestNoMergeLeftovers(t *testing.T) {
	// Built, so that this file does not hold them itself.
	ours, theirs := strings.Repeat("<", 7)+" ", strings.Repeat(">", 7)+" "
	for _, name := range strings.Fields(mustRun(t, "git", "-C", repoRoot(t), "ls-files")) {
		if strings.HasSuffix(name, ".orig") || strings.HasSuffix(name, ".rej") {
			t.Errorf("%s: a merge tool's leftover is tracked", name)
			continue
		}
		b, err := os.ReadFile(filepath.Join(repoRoot(t), name))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, ours) || strings.HasPrefix(line, theirs) {
				t.Errorf("%s:%d: a conflict marker: %q", name, i+1, line)
			}
		}
	}
}
