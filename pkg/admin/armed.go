package admin

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// FencingView is whether fencing is armed, as the Kubernetes API shows it
// (`fenced status` without --agent): the fencers, each as it publishes
// itself on its key Lease (publish.FencerStateOf) — in a pod or run by
// systemd alike —, the pause, the exclusions. Whatever could not be read
// is in Unknown, with why.
type FencingView struct {
	// Fencers are the fencers that published their state in the lease
	// namespace, by node; FencersReady those that are ready and not stale.
	Fencers      []FencerView `json:"fencers"`
	FencersReady int          `json:"fencersReady"`
	// Paused and PauseReason: the pause ConfigMap (taint.Paused).
	Paused      bool   `json:"paused"`
	PauseReason string `json:"pauseReason,omitempty"`
	// ExcludedNodes counts the Nodes an exclusion label holds back.
	ExcludedNodes int `json:"excludedNodes"`
	// Armed: a ready fencer that is not in dry-run and has nodes it can
	// fence, and fencing not paused. nil when that cannot be told (see
	// Unknown).
	Armed *bool `json:"armed,omitempty"`
	// Unknown says what could not be read, and why.
	Unknown []string `json:"unknown,omitempty"`
}

// FencerView is one fencer as its key Lease shows it.
type FencerView struct {
	Node string `json:"node"`
	// Ready: the fencer said it is in the gossip ring, and renewed that
	// within publish.FencerStateStaleAfter. Stale: it did not renew.
	Ready          bool       `json:"ready"`
	Stale          bool       `json:"stale,omitempty"`
	Mode           vocab.Mode `json:"mode"`
	DryRun         bool       `json:"dryRun"`
	InventoryNodes int        `json:"inventoryNodes"`
	// ConfigHash names the configuration file in force (the first 6 bytes
	// of its SHA-256, as the fencer's log says): fencers that show the
	// same run the same file.
	ConfigHash string    `json:"configHash,omitempty"`
	Renewed    time.Time `json:"renewed"`
}

// armed: this fencer, as published, would fence a failed node now.
func (f FencerView) armed() bool { return f.Ready && !f.DryRun && f.InventoryNodes > 0 }

// fencingView reads the FencingView of the cluster whose Nodes are nodes,
// its fencers from leases (the Leases of fenced's namespace, or why they
// could not be listed). It only reads; a read that fails (RBAC, an old
// deployment) is noted in Unknown, never an error of Status.
func (o *Operator) fencingView(ctx context.Context, nodes []corev1.Node, leases []coordinationv1.Lease, leasesErr error) *FencingView {
	v := &FencingView{Fencers: []FencerView{}}
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
	fencersKnown := leasesErr == nil
	if leasesErr != nil {
		v.Unknown = append(v.Unknown, fmt.Sprintf("fencers: %v", leasesErr))
	} else {
		now := o.now()
		for i := range leases {
			node, st, renewed, ok := publish.FencerStateOf(&leases[i])
			if !ok {
				continue
			}
			stale := now.Sub(renewed) > publish.FencerStateStaleAfter
			f := FencerView{Node: node, Ready: st.Ready && !stale, Stale: stale, Mode: st.Mode, DryRun: st.DryRun,
				InventoryNodes: st.InventoryNodes, ConfigHash: st.ConfigHash, Renewed: renewed}
			v.Fencers = append(v.Fencers, f)
			if f.Ready {
				v.FencersReady++
			}
		}
		sort.Slice(v.Fencers, func(i, j int) bool { return v.Fencers[i].Node < v.Fencers[j].Node })
	}
	// The pause disarms whatever the fencers say; otherwise armed needs
	// one ready fencer that would act, and the fencers must be known.
	switch {
	case v.Paused:
		v.Armed = new(bool)
	case fencersKnown:
		armed := false
		for _, f := range v.Fencers {
			armed = armed || f.armed()
		}
		v.Armed = &armed
	}
	return v
}

// Text is v as the lines under the status table: whether fencing is armed,
// then each fencer, the pause, the exclusions, and what could not be read.
func (v *FencingView) Text(now time.Time) string {
	verdict := "unknown (see below)"
	if v.Armed != nil && *v.Armed {
		verdict = "ARMED"
	} else if v.Armed != nil {
		verdict = "NOT ARMED"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fencing: %s\n", verdict)
	fmt.Fprintf(&b, "  fencers ready:     %d of %d (as they publish themselves on their Leases)\n", v.FencersReady, len(v.Fencers))
	if len(v.Fencers) == 0 && !slices.ContainsFunc(v.Unknown, func(u string) bool { return strings.HasPrefix(u, "fencers:") }) {
		fmt.Fprintf(&b, "  no fencer has published its state: none runs, or they are older than this fenced\n")
	}
	for _, f := range v.Fencers {
		state := "ready"
		switch {
		case f.Stale:
			state = "STALE"
		case !f.Ready:
			state = "not ready"
		}
		fmt.Fprintf(&b, "    %s: %s (renewed %s ago), mode %s, dry-run %s, inventory %d node(s), config %s\n",
			f.Node, state, now.Sub(f.Renewed).Round(time.Second), f.Mode, yesNo(f.DryRun), f.InventoryNodes, orNone(f.ConfigHash))
	}
	if hashes := v.configHashes(); len(hashes) > 1 {
		fmt.Fprintf(&b, "  configurations:    the ready fencers run %d different files (%s)\n", len(hashes), strings.Join(hashes, ", "))
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

// configHashes are the distinct configuration hashes of the ready fencers.
func (v *FencingView) configHashes() []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range v.Fencers {
		if f.Ready && !seen[f.ConfigHash] {
			seen[f.ConfigHash] = true
			out = append(out, orNone(f.ConfigHash))
		}
	}
	return out
}

func yesNo(b bool) string {
	if b {
		return "YES"
	}
	return "no"
}
