package deploy

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/stale"
	"fenced.io/fenced/pkg/taint"
)

// TestManifestsAgainstAPIServer hands every rendered kustomization (and
// test/kind/workload.yaml) to a real kube-apiserver with
// `kubectl apply --dry-run=server`: admission, defaulting and strict field
// validation as a cluster would run them. Then it applies the fullest
// render for real and asks the API server, with `kubectl auth can-i` as
// each ServiceAccount, for every verb the code uses (yes) and for a set it
// must not have (no), and runs pkg/fencing's fencer (and pkg/stale's report)
// with the fencer ServiceAccount's token until their informers have synced.
// Last it applies the opt-in that lets fencers delete stale
// VolumeAttachments and asks again.
func TestManifestsAgainstAPIServer(t *testing.T) {
	kubectl := kubectlPath(t) // skips with -short
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true})

	// A server-side dry run persists nothing, so the namespace the
	// renders' own Namespace object would create is not there for the
	// namespaced objects that follow it: create it first.
	if _, err := c.CreateNamespace(ctx, namespace); err != nil {
		t.Fatal(err)
	}
	kc := func(stdin []byte, args ...string) (string, string, error) {
		return run(t, stdin, kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	}

	var full []byte
	for _, k := range kustomizations {
		t.Run("dry-run/"+k.dir, func(t *testing.T) {
			out, _ := render(t, kubectl, k.dir)
			if k.dir == "deploy/daemonset/overlays/in-cluster-fencers" {
				full = out
			}
			if stdout, stderr, err := kc(out, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err != nil {
				t.Fatalf("kubectl apply --dry-run=server: %v\n%s%s", err, stdout, stderr)
			} else {
				t.Logf("%s", strings.TrimSpace(stdout))
			}
		})
	}
	t.Run("dry-run/test/kind/workload.yaml", func(t *testing.T) {
		if stdout, stderr, err := kc(nil, "apply", "--dry-run=server", "--validate=strict", "-f", path(t, "test/kind/workload.yaml")); err != nil {
			t.Fatalf("kubectl apply --dry-run=server: %v\n%s%s", err, stdout, stderr)
		}
	})
	if full == nil {
		t.Fatal("overlays/in-cluster-fencers was not rendered")
	}

	// For real: observers, fencers, all the RBAC. No node, no scheduler:
	// the DaemonSets stay without pods, which is all this needs.
	if stdout, stderr, err := kc(full, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s%s", err, stdout, stderr)
	}

	var canIAs func(t *testing.T, q query, as ...string) bool
	// canI asks as the ServiceAccount would authenticate: its user name and
	// the groups every ServiceAccount token carries, so a "no" also covers
	// whatever those groups are granted.
	canI := func(t *testing.T, sa string, q query) bool {
		t.Helper()
		return canIAs(t, q, "--as=system:serviceaccount:"+namespace+":"+sa,
			"--as-group=system:serviceaccounts", "--as-group=system:serviceaccounts:"+namespace,
			"--as-group=system:authenticated")
	}
	// canIAs asks as the user and groups of as (kubectl's --as flags).
	canIAs = func(t *testing.T, q query, as ...string) bool {
		t.Helper()
		res := q.resource
		if q.name != "" {
			res += "/" + q.name
		}
		args := append([]string{"auth", "can-i", q.verb, res}, as...)
		if q.subresource != "" {
			args = append(args, "--subresource="+q.subresource)
		}
		if q.namespace == "" {
			args = append(args, "--all-namespaces")
		} else {
			args = append(args, "--namespace="+q.namespace)
		}
		stdout, stderr, err := kc(nil, args...)
		switch strings.TrimSpace(stdout) {
		case "yes":
			return true
		case "no":
			return false
		}
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr)
		return false
	}

	observerYes := append(queriesOf(observerRules(), ""), queriesOf(agentLeaseRules(), namespace)...)
	fencerYes := append(append(append(append(queriesOf(observerRules(), ""), queriesOf(fencerRules(), "")...),
		queriesOf(leaseRules(), namespace)...), queriesOf(agentLeaseRules(), namespace)...),
		queriesOf(kubeletLeaseRules(), fencing.KubeletLeaseNamespace)...)
	// Verbs a fencer has that an observer must not (reading the kubelets'
	// Leases among them).
	var observerNo []query
	for _, q := range fencerYes {
		if !slices.Contains(observerYes, q) {
			observerNo = append(observerNo, q)
		}
	}
	// Never, for either: reading Secrets (the BMC passwords; the kubelet
	// mounts them), creating pods, deleting or creating Nodes, patching
	// where the code updates, evicting, Leases outside the lease
	// namespace (but reading the kubelets' — writing one would fake a
	// node's heartbeat), minting tokens, changing its own DaemonSets or RBAC, and
	// anything but reading the agent identity policy (changing or
	// deleting it, or its binding, would let any agent publish a key in
	// another node's name).
	never := []query{
		{verb: "list", resource: "secrets"},
		{verb: "get", resource: "secrets", namespace: namespace},
		{verb: "watch", resource: "secrets", namespace: namespace},
		{verb: "get", resource: "configmaps", namespace: namespace},
		{verb: "list", resource: "configmaps", namespace: namespace},
		// The pause is the operators' to set: no fencer lifts it.
		{verb: "update", resource: "configmaps", name: taint.PauseConfigMap, namespace: namespace},
		{verb: "patch", resource: "configmaps", name: taint.PauseConfigMap, namespace: namespace},
		{verb: "delete", resource: "configmaps", name: taint.PauseConfigMap, namespace: namespace},
		// The history's grant changes no other ConfigMap: not the fencers'
		// configuration (policy.dryRun, mode), and the history is not
		// deleted.
		{verb: "update", resource: "configmaps", name: "fenced-fencer-config", namespace: namespace},
		{verb: "patch", resource: "configmaps", name: "fenced-fencer-config", namespace: namespace},
		{verb: "delete", resource: "configmaps", name: taint.HistoryConfigMap, namespace: namespace},
		{verb: "create", resource: "pods", namespace: "default"},
		{verb: "create", resource: "pods", subresource: "eviction", namespace: "default"},
		{verb: "create", resource: "pods", subresource: "exec", namespace: "default"},
		{verb: "update", resource: "pods", namespace: "default"},
		{verb: "delete", resource: "nodes"},
		{verb: "create", resource: "nodes"},
		{verb: "patch", resource: "nodes"},
		{verb: "patch", resource: "nodes", subresource: "status"},
		{verb: "delete", resource: "volumeattachments.storage.k8s.io"},
		{verb: "update", resource: "volumeattachments.storage.k8s.io"},
		{verb: "delete", resource: "persistentvolumes"},
		{verb: "get", resource: "leases.coordination.k8s.io", namespace: "default"},
		{verb: "create", resource: "leases.coordination.k8s.io", namespace: "kube-system"},
		{verb: "list", resource: "leases.coordination.k8s.io", namespace: "kube-system"},
		{verb: "watch", resource: "leases.coordination.k8s.io", namespace: "kube-system"},
		{verb: "create", resource: "leases.coordination.k8s.io", namespace: fencing.KubeletLeaseNamespace},
		{verb: "update", resource: "leases.coordination.k8s.io", namespace: fencing.KubeletLeaseNamespace},
		{verb: "patch", resource: "leases.coordination.k8s.io", namespace: fencing.KubeletLeaseNamespace},
		{verb: "delete", resource: "leases.coordination.k8s.io", namespace: fencing.KubeletLeaseNamespace},
		{verb: "deletecollection", resource: "leases.coordination.k8s.io", namespace: fencing.KubeletLeaseNamespace},
		{verb: "list", resource: "leases.coordination.k8s.io"},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: namespace},
		{verb: "update", resource: "daemonsets.apps", namespace: namespace},
		{verb: "update", resource: "clusterroles.rbac.authorization.k8s.io"},
		{verb: "create", resource: "clusterrolebindings.rbac.authorization.k8s.io"},
		{verb: "delete", resource: "events", namespace: "default"},
		{verb: "list", resource: "validatingadmissionpolicies.admissionregistration.k8s.io"},
		{verb: "get", resource: "validatingadmissionpolicies.admissionregistration.k8s.io", name: "another-policy"},
		{verb: "get", resource: "validatingadmissionpolicybindings.admissionregistration.k8s.io", name: "another-policy"},
		{verb: "update", resource: "validatingadmissionpolicies.admissionregistration.k8s.io", name: publish.PolicyName},
		{verb: "patch", resource: "validatingadmissionpolicies.admissionregistration.k8s.io", name: publish.PolicyName},
		{verb: "delete", resource: "validatingadmissionpolicies.admissionregistration.k8s.io", name: publish.PolicyName},
		{verb: "update", resource: "validatingadmissionpolicybindings.admissionregistration.k8s.io", name: publish.PolicyName},
		{verb: "delete", resource: "validatingadmissionpolicybindings.admissionregistration.k8s.io", name: publish.PolicyName},
		{verb: "create", resource: "validatingadmissionpolicybindings.admissionregistration.k8s.io"},
	}

	for _, tc := range []struct {
		sa      string
		yes, no []query
	}{
		{observerSA, observerYes, append(observerNo, never...)},
		{fencerSA, fencerYes, never},
	} {
		t.Run("can-i/"+tc.sa, func(t *testing.T) {
			for _, q := range tc.yes {
				if !canI(t, tc.sa, q) {
					t.Errorf("%s cannot %s, which the code needs", tc.sa, q)
				}
			}
			for _, q := range tc.no {
				if canI(t, tc.sa, q) {
					t.Errorf("%s can %s, which it must not", tc.sa, q)
				}
			}
		})
	}

	// The fencer itself, with the fencer ServiceAccount's own token: its
	// informers sync, it lists and watches one kubelet's Lease by name as
	// it does for a node of interest, and reads it as it does right before
	// a taint write. The observer's token may not even list those.
	admin := c.Client()
	renewed := metav1.NewMicroTime(time.Now().Truncate(time.Microsecond)) // what a MicroTime keeps
	if _, err := admin.CoordinationV1().Leases(fencing.KubeletLeaseNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a"), RenewTime: &renewed},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a kubelet's Lease in %s: %v", fencing.KubeletLeaseNamespace, err)
	}
	asSA := func(t *testing.T, sa string) kubernetes.Interface {
		t.Helper()
		return serviceAccountClient(ctx, t, c, sa, nil)
	}
	t.Run("fencer-runs/"+fencerSA, func(t *testing.T) {
		cl := asSA(t, fencerSA)
		runFencer(t, cl, time.Minute)
		l, err := cl.CoordinationV1().Leases(fencing.KubeletLeaseNamespace).Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil || !l.Spec.RenewTime.Equal(&renewed) {
			t.Errorf("reading node-a's kubelet Lease as %s: %+v, %v", fencerSA, l, err)
		}
		byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "node-a").String()}
		if list, err := cl.CoordinationV1().Leases(fencing.KubeletLeaseNamespace).List(ctx, byName); err != nil || len(list.Items) != 1 {
			t.Errorf("listing node-a's kubelet Lease by name as %s: %v, %v", fencerSA, list, err)
		}
		w, err := cl.CoordinationV1().Leases(fencing.KubeletLeaseNamespace).Watch(ctx, byName)
		if err != nil {
			t.Errorf("watching node-a's kubelet Lease by name as %s: %v", fencerSA, err)
		} else {
			w.Stop()
		}
	})
	t.Run("kubelet-leases/"+observerSA, func(t *testing.T) {
		_, err := asSA(t, observerSA).CoordinationV1().Leases(fencing.KubeletLeaseNamespace).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("listing the kubelets' Leases as %s: %v, want Forbidden", observerSA, err)
		}
	})

	t.Run("operator", func(t *testing.T) {
		testOperatorRole(ctx, t, c, func(q query) bool {
			t.Helper()
			return canIAs(t, q, "--as="+operatorUser, "--as-group=system:authenticated")
		})
	})

	// Last, as it widens the fencer's rights: the opt-in that lets fencers
	// delete stale VolumeAttachments. Without it (the default, applied
	// above) the fencer cannot delete one, nor read what only the delete's
	// re-check reads; with it, it can, and the observer still cannot.
	t.Run("delete-stale-opt-in", func(t *testing.T) {
		optIn := queriesOf(stale.DeletePolicyRules(), "")
		for _, q := range optIn {
			if canI(t, fencerSA, q) {
				t.Errorf("%s can %s without the opt-in %s", fencerSA, q, deleteStaleDir)
			}
		}
		out, _ := renderWithDeleteOptIn(t, kubectl)
		if stdout, stderr, err := kc(out, "apply", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply (with %s): %v\n%s%s", deleteStaleDir, err, stdout, stderr)
		}
		for _, q := range optIn {
			if !canI(t, fencerSA, q) {
				t.Errorf("%s cannot %s with the opt-in %s", fencerSA, q, deleteStaleDir)
			}
			if canI(t, observerSA, q) {
				t.Errorf("%s can %s with the opt-in %s: it is the fencers'", observerSA, q, deleteStaleDir)
			}
		}
	})
}

// query is one `kubectl auth can-i` question; namespace "" asks across all
// namespaces (what a ClusterRole grants), name "" about any object.
type query struct{ verb, resource, subresource, namespace, name string }

func (q query) String() string {
	s := q.verb + " " + q.resource
	if q.name != "" {
		s += " " + q.name
	}
	if q.subresource != "" {
		s += "/" + q.subresource
	}
	if q.namespace == "" {
		return s + " (all namespaces)"
	}
	return s + " in " + q.namespace
}

// queriesOf expands rules into one query per verb, resource and resource
// name (a rule without names: one query about any object), in ns.
func queriesOf(rules []rbacv1.PolicyRule, ns string) []query {
	var out []query
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				res, sub, _ := strings.Cut(res, "/")
				if g != "" {
					res += "." + g
				}
				for _, v := range r.Verbs {
					for _, n := range names {
						out = append(out, query{verb: v, resource: res, subresource: sub, namespace: ns, name: n})
					}
				}
			}
		}
	}
	return out
}
