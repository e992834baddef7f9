package deploy

import (
	"reflect"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/taint"
)

// The ServiceAccounts and RBAC objects of deploy/daemonset/base/rbac.yaml.
const (
	namespace  = "fenced-system"
	observerSA = "fenced-observer"
	fencerSA   = "fenced-fencer"
	observerCR = "fenced-observer"
	fencerCR   = "fenced-fencer"
	leaseRole  = "fenced-fencer-leases"
	// Every agent's own key Lease (pkg/identity/publish).
	agentLeaseRole = "fenced-agent-leases"
	rbacFile       = "deploy/daemonset/base/rbac.yaml"
	// The admission policy that lets only a node's own agent write its
	// key Lease (publish.PolicyName).
	policyFile  = "deploy/daemonset/base/agent-identity-policy.yaml"
	fencerLabel = "node-restriction.kubernetes.io/fenced-fencer"
	// Where the fencer DaemonSet mounts the BMC Secret.
	bmcDir = "/etc/fenced/bmc"
)

// observerRules: every agent lists and watches Nodes (pkg/agent's Node
// informer: who may join the ring, where the peers are).
func observerRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
	}
}

// fencerRules: what pkg/taint needs (taint.PolicyRules, the single source)
// plus pkg/fencing's VolumeAttachment informer (a taint is removed only once
// no VolumeAttachment of the node is left) and publish.PolicyInForce's reads
// (policyCheckRules). Nodes list/watch come with the observer role, which
// fencers are bound to as well.
func fencerRules() []rbacv1.PolicyRule {
	return append(taint.PolicyRules(),
		rbacv1.PolicyRule{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"get", "list", "watch"}},
		policyCheckRules()[0],
	)
}

// policyCheckRules: publish.PolicyInForce gets the ValidatingAdmissionPolicy
// and the binding named publish.PolicyName, nothing else (cluster-scoped).
// TestAgentIdentityPolicy runs it with the fencer's own token.
func policyCheckRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
			ResourceNames: []string{publish.PolicyName}, Verbs: []string{"get"}},
	}
}

// agentLeaseRules: publish.Publish, which every agent (observer or fencer)
// runs at start, gets its key Lease and creates or updates it, in the lease
// namespace only. TestAgentIdentityPolicy runs it with the ServiceAccounts'
// own tokens.
func agentLeaseRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
}

// leaseRules: pkg/fencing's power Leases, in the lease namespace only
// (informer: list/watch; acquire: create/update; release: delete).
func leaseRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	}
}

// rbacObjects collects the RBAC objects of a manifest by kind and name.
type rbacObjects struct {
	clusterRoles        map[string]*rbacv1.ClusterRole
	clusterRoleBindings map[string]*rbacv1.ClusterRoleBinding
	roles               map[string]*rbacv1.Role
	roleBindings        map[string]*rbacv1.RoleBinding
}

func collectRBAC(objs []k8sruntime.Object) rbacObjects {
	r := rbacObjects{
		clusterRoles:        map[string]*rbacv1.ClusterRole{},
		clusterRoleBindings: map[string]*rbacv1.ClusterRoleBinding{},
		roles:               map[string]*rbacv1.Role{},
		roleBindings:        map[string]*rbacv1.RoleBinding{},
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			r.clusterRoles[o.Name] = o
		case *rbacv1.ClusterRoleBinding:
			r.clusterRoleBindings[o.Name] = o
		case *rbacv1.Role:
			r.roles[o.Name] = o
		case *rbacv1.RoleBinding:
			r.roleBindings[o.Name] = o
		}
	}
	return r
}

// TestRBACMatchesCode keeps the manifest and the code from drifting apart:
// the rules in rbac.yaml must be exactly what the code needs — a verb the
// code starts to use fails here before it fails in a cluster, and a verb
// added to the manifest without a reason fails too.
func TestRBACMatchesCode(t *testing.T) {
	r := collectRBAC(decodeObjects(t, rbacFile, readFile(t, rbacFile)))

	wantNames := func(kind string, got []string, want ...string) {
		t.Helper()
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s in %s: %v, want exactly %v", kind, rbacFile, got, want)
		}
	}
	keys := func(m any) []string {
		var out []string
		for _, k := range reflect.ValueOf(m).MapKeys() {
			out = append(out, k.String())
		}
		return out
	}
	wantNames("ClusterRoles", keys(r.clusterRoles), observerCR, fencerCR)
	wantNames("ClusterRoleBindings", keys(r.clusterRoleBindings), observerCR, fencerCR)
	wantNames("Roles", keys(r.roles), leaseRole, agentLeaseRole)
	wantNames("RoleBindings", keys(r.roleBindings), leaseRole, agentLeaseRole)

	roleRules := func(name string) []rbacv1.PolicyRule {
		ro := r.roles[name]
		if ro == nil {
			return nil
		}
		// The Roles live where the agents write and the fencers look for
		// their Leases.
		if ro.Namespace != config.DefaultLeaseNamespace {
			t.Errorf("Role %s is in namespace %q; fencer.leaseNamespace defaults to %q", name, ro.Namespace, config.DefaultLeaseNamespace)
		}
		return ro.Rules
	}
	for _, c := range []struct {
		name      string
		got, want []rbacv1.PolicyRule
	}{
		{"ClusterRole " + observerCR, rulesOf(r.clusterRoles[observerCR]), observerRules()},
		{"ClusterRole " + fencerCR + " (taint.PolicyRules() + VolumeAttachments + policy check)", rulesOf(r.clusterRoles[fencerCR]), fencerRules()},
		{"Role " + leaseRole, roleRules(leaseRole), leaseRules()},
		{"Role " + agentLeaseRole, roleRules(agentLeaseRole), agentLeaseRules()},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			g, _ := yaml.Marshal(c.got)
			w, _ := yaml.Marshal(c.want)
			t.Errorf("%s in %s differs from the code's needs\ngot:\n%s\nwant:\n%s", c.name, rbacFile, g, w)
		}
	}

	// Who gets what: the observer identity nothing beyond the observer role
	// and its own key Lease.
	type binding struct {
		namespace string
		roleRef   rbacv1.RoleRef
		subjects  []rbacv1.Subject
	}
	got := map[string]binding{}
	for n, b := range r.clusterRoleBindings {
		got["ClusterRoleBinding "+n] = binding{b.Namespace, b.RoleRef, b.Subjects}
	}
	for n, b := range r.roleBindings {
		got["RoleBinding "+n] = binding{b.Namespace, b.RoleRef, b.Subjects}
	}
	sa := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}
	}
	ref := func(kind, name string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: name}
	}
	for name, want := range map[string]binding{
		"ClusterRoleBinding " + observerCR: {"", ref("ClusterRole", observerCR), []rbacv1.Subject{sa(observerSA), sa(fencerSA)}},
		"ClusterRoleBinding " + fencerCR:   {"", ref("ClusterRole", fencerCR), []rbacv1.Subject{sa(fencerSA)}},
		"RoleBinding " + leaseRole:         {namespace, ref("Role", leaseRole), []rbacv1.Subject{sa(fencerSA)}},
		"RoleBinding " + agentLeaseRole:    {namespace, ref("Role", agentLeaseRole), []rbacv1.Subject{sa(observerSA), sa(fencerSA)}},
	} {
		if g := got[name]; !reflect.DeepEqual(g, want) {
			t.Errorf("%s in %s = %+v, want %+v", name, rbacFile, g, want)
		}
	}
}

func rulesOf(cr *rbacv1.ClusterRole) []rbacv1.PolicyRule {
	if cr == nil {
		return nil
	}
	if cr.AggregationRule != nil {
		// An aggregated role's rules are whatever other roles contribute:
		// nothing this test could pin down.
		return []rbacv1.PolicyRule{{Verbs: []string{"<aggregated>"}}}
	}
	return cr.Rules
}
