package admin

import (
	"context"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// FencerPodSelector selects the fencer DaemonSet's pods in the lease
// namespace, as the chart and the kustomize component label them.
const FencerPodSelector = "app.kubernetes.io/name=fenced,app.kubernetes.io/component=fencer"

// FencingView is whether fencing is armed, as the Kubernetes API shows it
// (`fenced status` without --agent): fencers that run and are ready, what
// their configuration says (dry-run, mode, inventory), the pause, the
// exclusions. Whatever could not be read is in Unknown, with why.
type FencingView struct {
	// FencerPods are the fencer pods in the lease namespace
	// (FencerPodSelector); FencerPodsReady those whose Ready condition is
	// True — a fencer is ready once it is in the gossip ring. Fencers run
	// as systemd units have no pod: the API does not show them.
	FencerPods      int `json:"fencerPods"`
	FencerPodsReady int `json:"fencerPodsReady"`
	// FencerConfig is the ConfigMap (and key) the fencer pods read their
	// configuration from; DryRun, Mode and InventoryNodes are read from it
	// (InventoryNodes: the nodes its bmc.nodes and topology.nodes name).
	FencerConfig   string     `json:"fencerConfig,omitempty"`
	DryRun         *bool      `json:"dryRun,omitempty"`
	Mode           vocab.Mode `json:"mode,omitempty"`
	InventoryNodes *int       `json:"inventoryNodes,omitempty"`
	// Paused and PauseReason: the pause ConfigMap (taint.Paused).
	Paused      bool   `json:"paused"`
	PauseReason string `json:"pauseReason,omitempty"`
	// ExcludedNodes counts the Nodes an exclusion label holds back.
	ExcludedNodes int `json:"excludedNodes"`
	// Armed: a fencer pod is ready, fencing is not paused and not in
	// dry-run. nil when that cannot be told (see Unknown).
	Armed *bool `json:"armed,omitempty"`
	// Unknown says what could not be read, and why.
	Unknown []string `json:"unknown,omitempty"`
}

// fencingView reads the FencingView of the cluster whose Nodes are nodes.
// It only reads; a read that fails (RBAC, an old deployment) is noted in
// Unknown, never an error of Status.
func (o *Operator) fencingView(ctx context.Context, nodes []corev1.Node) *FencingView {
	v := &FencingView{}
	for i := range nodes {
		if taint.ExcludedBy(&nodes[i]) != "" {
			v.ExcludedNodes++
		}
	}
	cm, err := o.Client.CoreV1().ConfigMaps(o.LeaseNamespace).Get(ctx, taint.PauseConfigMap, metav1.GetOptions{})
	switch {
	case err == nil:
		v.Paused, v.PauseReason = taint.Paused(cm)
	case !apierrors.IsNotFound(err):
		v.Unknown = append(v.Unknown, fmt.Sprintf("pause: %v", err))
	}
	pods, err := o.Client.CoreV1().Pods(o.LeaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: FencerPodSelector})
	if err != nil {
		v.Unknown = append(v.Unknown, fmt.Sprintf("fencer pods: %v", err))
	} else {
		for i := range pods.Items {
			v.FencerPods++
			if podReady(&pods.Items[i]) {
				v.FencerPodsReady++
			}
		}
		o.readFencerConfig(ctx, v, pods.Items)
	}
	// Any one of these disarms; armed needs a ready fencer and a known,
	// false dry-run. Otherwise (no pods: systemd fencers) it cannot be told.
	switch {
	case v.Paused || (v.DryRun != nil && *v.DryRun) || (v.FencerPods > 0 && v.FencerPodsReady == 0):
		v.Armed = new(bool)
	case v.FencerPodsReady > 0 && v.DryRun != nil:
		armed := true
		v.Armed = &armed
	}
	return v
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readFencerConfig reads the configuration the first fencer pod runs with:
// its --config argument, the volume mounted there, the ConfigMap key.
func (o *Operator) readFencerConfig(ctx context.Context, v *FencingView, pods []corev1.Pod) {
	if len(pods) == 0 {
		v.Unknown = append(v.Unknown, "dry-run: no fencer pod in namespace "+o.LeaseNamespace+" (fencers run as systemd units are not visible in the API: ask one with --agent)")
		return
	}
	name, key, ok := configMapOf(&pods[0])
	if !ok {
		v.Unknown = append(v.Unknown, "dry-run: pod "+pods[0].Name+" reads its configuration from no ConfigMap")
		return
	}
	v.FencerConfig = "configmap/" + o.LeaseNamespace + "/" + name + " key " + key
	cm, err := o.Client.CoreV1().ConfigMaps(o.LeaseNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		v.Unknown = append(v.Unknown, fmt.Sprintf("dry-run: %v", err))
		return
	}
	// Decoded, not validated (config.Parse): validating reads the password
	// files, which live on the fencers' hosts, not here. The fencers
	// validated it when they started; this reads what it says.
	var raw config.Configuration
	if err := yaml.Unmarshal([]byte(cm.Data[key]), &raw); err != nil {
		v.Unknown = append(v.Unknown, fmt.Sprintf("dry-run: %s: %v", v.FencerConfig, err))
		return
	}
	dryRun := raw.Policy.DryRun != nil && *raw.Policy.DryRun
	v.DryRun, v.Mode = &dryRun, raw.Policy.Mode
	if v.Mode == "" {
		v.Mode = core.DefaultPolicy().Mode
	}
	named := map[string]bool{}
	for _, n := range raw.BMC.Nodes {
		named[n.Name] = true
	}
	for _, n := range raw.Topology.Nodes {
		named[n.Name] = true
	}
	inventory := len(named)
	v.InventoryNodes = &inventory
}

// configMapOf finds the ConfigMap and key behind a pod's --config
// argument: the volume mounted at the longest prefix of its path.
func configMapOf(p *corev1.Pod) (name, key string, ok bool) {
	for _, c := range p.Spec.Containers {
		file := configArg(c.Args)
		if file == "" {
			continue
		}
		var mount *corev1.VolumeMount
		for i, m := range c.VolumeMounts {
			if strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
				mount = &c.VolumeMounts[i]
			}
		}
		if mount == nil {
			continue
		}
		rel := strings.TrimPrefix(file, strings.TrimSuffix(mount.MountPath, "/")+"/")
		if mount.SubPath != "" {
			rel = path.Join(mount.SubPath, rel)
		}
		for _, vol := range p.Spec.Volumes {
			if vol.Name != mount.Name || vol.ConfigMap == nil {
				continue
			}
			key = rel
			for _, it := range vol.ConfigMap.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
			return vol.ConfigMap.Name, key, true
		}
	}
	return "", "", false
}

// configArg is the value of --config in an agent's arguments.
func configArg(args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v
		}
		if a == "--config" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// Text is v as the lines under the status table: whether fencing is armed,
// then each part of that, then what could not be read.
func (v *FencingView) Text() string {
	verdict := "unknown (see below)"
	if v.Armed != nil && *v.Armed {
		verdict = "ARMED"
	} else if v.Armed != nil {
		verdict = "NOT ARMED"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fencing: %s\n", verdict)
	fmt.Fprintf(&b, "  fencer pods ready: %d of %d\n", v.FencerPodsReady, v.FencerPods)
	if v.DryRun != nil {
		fmt.Fprintf(&b, "  dry-run:           %s (%s)\n", yesNo(*v.DryRun), v.FencerConfig)
		fmt.Fprintf(&b, "  mode:              %s\n", v.Mode)
		fmt.Fprintf(&b, "  inventory:         %d node(s) named (bmc.nodes, topology.nodes)\n", *v.InventoryNodes)
	}
	paused := "no"
	if v.Paused {
		paused = "YES: " + reasonOr(v.PauseReason) + " (fenced resume ends it)"
	}
	fmt.Fprintf(&b, "  paused:            %s\n", paused)
	fmt.Fprintf(&b, "  excluded nodes:    %d\n", v.ExcludedNodes)
	for _, u := range v.Unknown {
		fmt.Fprintf(&b, "  unknown:           %s\n", u)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func yesNo(b bool) string {
	if b {
		return "YES"
	}
	return "no"
}
