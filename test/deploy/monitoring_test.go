package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// promtool is Prometheus' rule checker and unit-test runner, pinned and
// built from the Go module proxy on first use (a few minutes, then cached
// by the Go build cache). v0.316.0 is Prometheus 3.16.0.
const promtool = "github.com/prometheus/prometheus/cmd/promtool@v0.316.0"

// The monitoring files (docs/operations.md, "Monitoring: alert rules and
// dashboard").
const (
	rulesFile      = "deploy/monitoring/prometheus-rules.yaml"
	ruleTestsDir   = "deploy/monitoring/tests"
	dashboardFile  = "deploy/monitoring/grafana-dashboard.json"
	monitoringComp = "deploy/daemonset/components/monitoring"
	// prometheusRuleFile is generated from rulesFile.
	prometheusRuleFile = monitoringComp + "/prometheusrule.yaml"
	// runbookDoc holds one runbook section per alert, the heading the
	// alert's name.
	runbookDoc = "docs/operations.md"
	// runbookBaseURL is runbookDoc's address: every alert's runbook_url
	// is it plus #<the alert's section>. It is the chart's default
	// prometheusRule.runbookBaseURL, which replaces it in the chart's rules.
	runbookBaseURL = "https://github.com/fenced-io/fenced/blob/main/" + runbookDoc
)

var update = flag.Bool("update", false, "rewrite "+prometheusRuleFile+" from "+rulesFile)

// alertRule is one rule of a Prometheus rule file.
type alertRule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// ruleGroups is a Prometheus rule file (and a PrometheusRule's spec).
type ruleGroups struct {
	Groups []struct {
		Name  string      `json:"name"`
		Rules []alertRule `json:"rules"`
	} `json:"groups"`
}

// loadRules parses the rule file strictly.
func loadRules(t *testing.T) ruleGroups {
	t.Helper()
	var rg ruleGroups
	if err := yaml.UnmarshalStrict(readFile(t, rulesFile), &rg); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return rg
}

// prometheusRuleHeader precedes the rule file's groups in the generated
// PrometheusRule; its namespace comes from the kustomization.
const prometheusRuleHeader = `# GENERATED from deploy/monitoring/prometheus-rules.yaml — do not edit; edit
# that file, then: go test ./test/deploy -run TestPrometheusRuleComponent -update
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: fenced
  namespace: fenced-system
  labels:
    app.kubernetes.io/name: fenced
spec:
`

// prometheusRuleFor wraps the rule file's groups, comments included, in a
// PrometheusRule: the file's text from "groups:" on, indented under spec.
func prometheusRuleFor(t *testing.T, rules []byte) []byte {
	t.Helper()
	i := bytes.Index(rules, []byte("\ngroups:\n"))
	if i < 0 {
		t.Fatalf("%s: no top-level groups:", rulesFile)
	}
	var b bytes.Buffer
	b.WriteString(prometheusRuleHeader)
	for _, line := range strings.SplitAfter(string(rules[i+1:]), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes()
}

// TestPrometheusRuleComponent: the kustomize component's PrometheusRule is
// the rule file, byte for byte below its header (one source, no hand
// copy), and a kustomization using the component renders it in fenced's
// namespace with the same groups.
func TestPrometheusRuleComponent(t *testing.T) {
	want := prometheusRuleFor(t, readFile(t, rulesFile))
	if *update {
		if err := os.WriteFile(path(t, prometheusRuleFile), want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := readFile(t, prometheusRuleFile); !bytes.Equal(got, want) {
		t.Fatalf("%s is not generated from %s: run go test ./test/deploy -run TestPrometheusRuleComponent -update", prometheusRuleFile, rulesFile)
	}

	kubectl := kubectlPath(t)
	dir := t.TempDir()
	relTo := func(p string) string {
		r, err := filepath.Rel(dir, path(t, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	kust := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n",
		relTo("deploy/daemonset/base"), relTo(monitoringComp))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := run(t, nil, kubectl, "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize base + %s: %v\n%s", monitoringComp, err, stderr)
	}
	obj := renderedPrometheusRule(t, out)
	if obj.Metadata.Name != "fenced" || obj.Metadata.Namespace != namespace {
		t.Errorf("PrometheusRule %s/%s, want %s/fenced", obj.Metadata.Namespace, obj.Metadata.Name, namespace)
	}
	if rules := loadRules(t); !reflect.DeepEqual(obj.Spec, rules) {
		t.Errorf("rendered PrometheusRule's groups differ from %s:\n%+v\nwant\n%+v", rulesFile, obj.Spec, rules)
	}
}

// prometheusRuleObject is the part of a PrometheusRule the tests read.
type prometheusRuleObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec ruleGroups `json:"spec"`
}

// renderedPrometheusRule returns the one PrometheusRule of a render.
func renderedPrometheusRule(t *testing.T, render string) prometheusRuleObject {
	t.Helper()
	var found []prometheusRuleObject
	for _, doc := range splitDocs(t, []byte(render)) {
		var obj prometheusRuleObject
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == "PrometheusRule" {
			found = append(found, obj)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d PrometheusRules rendered, want 1:\n%s", len(found), render)
	}
	return found[0]
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	a := strings.ToLower(strings.TrimSpace(heading))
	a = regexp.MustCompile(`[^\p{L}\p{N} _-]`).ReplaceAllString(a, "")
	return strings.ReplaceAll(a, " ", "-")
}

// TestAlertRulesShape: every alert has a known severity, a summary, a
// description and an absolute runbook_url pointing to its own heading in
// runbookDoc (runbookBaseURL#anchor; not the non-standard runbook key),
// and promtool cases in deploy/monitoring/tests where it fires and where it
// does not.
func TestAlertRulesShape(t *testing.T) {
	anchors := markdownAnchors(string(readFile(t, runbookDoc)))

	type cases struct{ firing, quiet bool }
	tested := map[string]*cases{}
	for _, f := range walk(t, ruleTestsDir, ".yaml") {
		var tf struct {
			RuleFiles []string `json:"rule_files"`
			Tests     []struct {
				AlertRuleTest []struct {
					Alertname string `json:"alertname"`
					ExpAlerts []any  `json:"exp_alerts"`
				} `json:"alert_rule_test"`
			} `json:"tests"`
		}
		if err := yaml.Unmarshal(readFile(t, rel(t, f)), &tf); err != nil {
			t.Fatalf("%s: %v", rel(t, f), err)
		}
		if !slices.Equal(tf.RuleFiles, []string{"../prometheus-rules.yaml"}) {
			t.Errorf("%s: rule_files %v, want [../prometheus-rules.yaml]", rel(t, f), tf.RuleFiles)
		}
		for _, tc := range tf.Tests {
			for _, a := range tc.AlertRuleTest {
				c := tested[a.Alertname]
				if c == nil {
					c = &cases{}
					tested[a.Alertname] = c
				}
				if len(a.ExpAlerts) > 0 {
					c.firing = true
				} else {
					c.quiet = true
				}
			}
		}
	}

	alerts := map[string]bool{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is not an alert (%q): the metric-existence test reads alerts only", g.Name, r.Record)
				continue
			}
			alerts[r.Alert] = true
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if _, ok := r.Annotations["runbook"]; ok {
				t.Errorf("%s: a runbook annotation; the key alerting tools read is runbook_url", r.Alert)
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBaseURL+"#")
			if !ok || anchor != githubAnchor(r.Alert) || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q, want %s#%s and a heading %s in %s", r.Alert, r.Annotations["runbook_url"], runbookBaseURL, githubAnchor(r.Alert), r.Alert, runbookDoc)
			}
			switch c := tested[r.Alert]; {
			case c == nil:
				t.Errorf("%s: no promtool case in %s", r.Alert, ruleTestsDir)
			case !c.firing:
				t.Errorf("%s: no promtool case where it fires", r.Alert)
			case !c.quiet:
				t.Errorf("%s: no promtool case where it does not fire", r.Alert)
			}
		}
	}
	for name := range tested {
		if !alerts[name] {
			t.Errorf("%s: promtool cases for an alert %s does not have", name, rulesFile)
		}
	}
}

// Label lists in PromQL: by/on keep the labels named, without/ignoring
// drop them; an aggregation operator straight before its parenthesis
// (max(...), or max(...) by (...)) is the form the rules do not use.
var (
	labelList      = regexp.MustCompile(`\b(by|on|without|ignoring)\s*\(([^)]*)\)`)
	bareAggregator = regexp.MustCompile(`\b(sum|min|max|avg|count|group|stddev|stdvar|topk|bottomk|quantile|count_values)\s*\(`)
)

// TestAlertRulesKeepCluster: several clusters can share one Prometheus, told
// apart by a cluster label; every aggregation and vector match of the rules
// keeps that label (by (cluster, ...), on (cluster, ...)), so that an alert
// fires per cluster instead of merging them (without one, by (cluster)
// groups as if it were not there). Aggregations are written by (...)
// before their argument, so that this check sees each one's grouping.
func TestAlertRulesKeepCluster(t *testing.T) {
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if m := bareAggregator.FindString(r.Expr); m != "" {
				t.Errorf("%s: %q: write the aggregation as %s by (cluster, ...) (...)", r.Alert, m, strings.TrimRight(m, " ("))
			}
			for _, m := range labelList.FindAllStringSubmatch(r.Expr, -1) {
				var labels []string
				for _, l := range strings.Split(m[2], ",") {
					labels = append(labels, strings.TrimSpace(l))
				}
				keeps := m[1] == "by" || m[1] == "on"
				if slices.Contains(labels, "cluster") != keeps {
					t.Errorf("%s: %q drops the cluster label: want %s (cluster, ...)", r.Alert, m[0], m[1])
				}
			}
		}
	}
}

// TestHelmPrometheusRule: the chart's PrometheusRule goes where
// prometheusRule.namespace says, carries prometheusRule.labels for the
// operator's ruleSelector, and its runbook_url annotations start with
// prometheusRule.runbookBaseURL, whose default is runbookBaseURL; it holds
// the rule file's groups otherwise unchanged. A base that is not an
// absolute URL is refused.
func TestHelmPrometheusRule(t *testing.T) {
	var values struct {
		PrometheusRule struct {
			RunbookBaseURL string `json:"runbookBaseURL"`
		} `json:"prometheusRule"`
	}
	if err := yaml.Unmarshal(readFile(t, chartDir, "values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	if got := values.PrometheusRule.RunbookBaseURL; got != runbookBaseURL {
		t.Errorf("values.yaml prometheusRule.runbookBaseURL %q, want %q (the base of %s's runbook_url)", got, runbookBaseURL, rulesFile)
	}

	helm := helmPath(t)
	const wiki = "https://wiki.example.com/ops/fenced"
	for _, tc := range []struct {
		name, values, namespace, base string
		labels                        map[string]string
	}{
		{"defaults", "prometheusRule:\n  enabled: true\n", namespace, runbookBaseURL, nil},
		{"every knob", "prometheusRule:\n  enabled: true\n  namespace: monitoring\n  labels:\n    release: prometheus\n  runbookBaseURL: " + wiki + "\n",
			"monitoring", wiki, map[string]string{"release": "prometheus"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helmTemplate(t, helm, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			want := loadRules(t)
			for _, g := range want.Groups {
				for _, r := range g.Rules {
					r.Annotations["runbook_url"] = strings.Replace(r.Annotations["runbook_url"], runbookBaseURL+"#", tc.base+"#", 1)
				}
			}
			obj := renderedPrometheusRule(t, out)
			if obj.Metadata.Namespace != tc.namespace {
				t.Errorf("namespace %q, want %q", obj.Metadata.Namespace, tc.namespace)
			}
			for k, v := range tc.labels {
				if obj.Metadata.Labels[k] != v {
					t.Errorf("label %s=%q, want %q (labels %v)", k, obj.Metadata.Labels[k], v, obj.Metadata.Labels)
				}
			}
			for _, g := range obj.Spec.Groups {
				for _, r := range g.Rules {
					if !strings.HasPrefix(r.Annotations["runbook_url"], tc.base+"#") {
						t.Errorf("%s: runbook_url %q, want it under %s", r.Alert, r.Annotations["runbook_url"], tc.base)
					}
				}
			}
			if !reflect.DeepEqual(obj.Spec, want) {
				t.Errorf("rendered rules differ from %s with the base %s:\n%+v\nwant\n%+v", rulesFile, tc.base, obj.Spec, want)
			}
		})
	}
	for _, bad := range []string{"docs/operations.md", wiki + "#alerts"} {
		if _, err := helmTemplate(t, helm, "prometheusRule:\n  enabled: true\n  runbookBaseURL: "+bad+"\n"); err == nil || !strings.Contains(err.Error(), "runbookBaseURL") {
			t.Errorf("runbookBaseURL %q: %v; want the schema to refuse it", bad, err)
		}
	}
}

// runPromtool runs the pinned promtool with args in the repository root.
func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, append([]string{"run", promtool}, args...)...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run %s %s: %v\n%s", promtool, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRules checks the rule file with promtool and runs its unit
// tests (deploy/monitoring/tests): each alert firing and not firing on
// synthetic series.
func TestAlertRules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds promtool from the Go module proxy (minutes the first time); skipped with -short")
	}
	t.Log(runPromtool(t, "check", "rules", rulesFile))
	var tests []string
	for _, f := range walk(t, ruleTestsDir, ".yaml") {
		tests = append(tests, rel(t, f))
	}
	t.Log(runPromtool(t, append([]string{"test", "rules"}, tests...)...))
}

// TestGrafanaDashboard: the dashboard is valid JSON Grafana imports — a
// uid, a datasource variable every query uses, unique panel ids, and a
// PromQL query in every target.
func TestGrafanaDashboard(t *testing.T) {
	type target struct {
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
		Datasource map[string]any `json:"datasource"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Title   string   `json:"title"`
		Type    string   `json:"type"`
		Targets []target `json:"targets"`
	}
	var d struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(bytes.NewReader(readFile(t, dashboardFile)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: both needed", d.UID, d.Title)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query string `json:"query"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Error("no datasource variable of type prometheus")
	}
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			if !strings.Contains(tg.Expr, "fenced_") || tg.RefID == "" || tg.Datasource["uid"] != "${datasource}" {
				t.Errorf("panel %q: target %+v: want a fenced_ query, a refId and datasource ${datasource}", p.Title, tg)
			}
		}
	}
	if queries == 0 {
		t.Error("no queries")
	}
}
