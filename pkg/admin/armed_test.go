package admin

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/taint"
)

// fencerPod is a fencer DaemonSet pod as the chart makes it: its
// configuration from ConfigMap cm, mounted at /etc/fenced/config.
func fencerPod(name string, ready bool, cm string) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS,
			Labels: map[string]string{"app.kubernetes.io/name": "fenced", "app.kubernetes.io/component": "fencer"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "fenced", Args: []string{"agent", "--config=/etc/fenced/config/config.yaml"},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/fenced/config"}, {Name: "bmc", MountPath: "/etc/fenced/bmc"}}}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}},
		},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func fencerConfig(dryRun string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fenced-fencer-config", Namespace: testNS},
		Data: map[string]string{"config.yaml": `apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
policy: {mode: confirm-only, dryRun: ` + dryRun + `}
bmc:
  defaults: {protocol: ipmi, username: u, passwordFile: /etc/fenced/bmc/password}
  nodes:
    - {name: w1, address: 10.0.0.1}
    - {name: w2, address: 10.0.0.2}
`}}
}

// TestFencingView: status without --agent tells from the API whether
// fencing is armed — fencer pods ready, their configuration's dry-run and
// inventory, the pause — and says what it could not read.
func TestFencingView(t *testing.T) {
	excluded := newNode("n1", corev1.ConditionTrue)
	excluded.Labels = map[string]string{taint.ExcludeLabel: "true"}
	for _, tc := range []struct {
		name      string
		objs      []runtime.Object
		armed     string // "yes", "no" or "" (unknown)
		want      []string
		inventory int
	}{
		{"armed", []runtime.Object{fencerPod("f1", true, "fenced-fencer-config"), fencerPod("f2", false, "fenced-fencer-config"), fencerConfig("false")},
			"yes", []string{"fencing: ARMED", "fencer pods ready: 1 of 2", "dry-run:           no", "mode:              confirm-only", "2 node(s)", "excluded nodes:    1"}, 2},
		{"dry-run", []runtime.Object{fencerPod("f1", true, "fenced-fencer-config"), fencerConfig("true")},
			"no", []string{"fencing: NOT ARMED", "dry-run:           YES"}, 2},
		{"paused", []runtime.Object{fencerPod("f1", true, "fenced-fencer-config"), fencerConfig("false"),
			pauseCM(map[string]string{"paused": "true", "reason": "SAN"})}, "no", []string{"fencing: NOT ARMED", "paused:            YES: SAN"}, 2},
		{"no fencer ready", []runtime.Object{fencerPod("f1", false, "fenced-fencer-config"), fencerConfig("false")},
			"no", []string{"fencing: NOT ARMED", "fencer pods ready: 0 of 1"}, 2},
		{"systemd fencers only", nil, "", []string{"fencing: unknown", "fencers run as systemd units are not visible"}, -1},
		{"config missing", []runtime.Object{fencerPod("f1", true, "gone")}, "", []string{"fencing: unknown", `configmaps "gone" not found`}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, append(tc.objs, excluded)...)
			e.op.LeaseNamespace = testNS
			s, err := e.op.Status(context.Background(), StatusOptions{})
			if err != nil {
				t.Fatal(err)
			}
			v := s.Fencing
			armed := ""
			if v.Armed != nil {
				armed = map[bool]string{true: "yes", false: "no"}[*v.Armed]
			}
			if armed != tc.armed {
				t.Errorf("armed = %q, want %q: %+v", armed, tc.armed, v)
			}
			if (tc.inventory < 0) != (v.InventoryNodes == nil) || (v.InventoryNodes != nil && *v.InventoryNodes != tc.inventory) {
				t.Errorf("inventory = %v, want %d", v.InventoryNodes, tc.inventory)
			}
			var out strings.Builder
			if err := printer.Print(&out, "", s.Doc(t0)); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestConfigMapOf(t *testing.T) {
	p := fencerPod("f", true, "cm")
	for _, tc := range []struct {
		name           string
		args           []string
		items          []corev1.KeyToPath
		wantCM, wantKy string
	}{
		{"--config=", []string{"agent", "--config=/etc/fenced/config/config.yaml"}, nil, "cm", "config.yaml"},
		{"--config FILE", []string{"agent", "--config", "/etc/fenced/config/sub/c.yaml"}, nil, "cm", "sub/c.yaml"},
		{"items", []string{"--config=/etc/fenced/config/c.yaml"}, []corev1.KeyToPath{{Key: "fencer.yaml", Path: "c.yaml"}}, "cm", "fencer.yaml"},
		{"not a ConfigMap", []string{"--config=/etc/fenced/bmc/x"}, nil, "", ""},
		{"no --config", []string{"agent"}, nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.Spec.Containers[0].Args = tc.args
			p.Spec.Volumes[0].ConfigMap.Items = tc.items
			cm, key, ok := configMapOf(p)
			if cm != tc.wantCM || key != tc.wantKy || ok != (tc.wantCM != "") {
				t.Errorf("configMapOf = %q, %q, %v; want %q, %q", cm, key, ok, tc.wantCM, tc.wantKy)
			}
		})
	}
}
