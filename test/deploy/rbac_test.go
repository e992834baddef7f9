package deploy

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/yaml"

	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/stale"
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
	// The fencer's view of the kubelets' Leases, in kube-node-lease
	// (fencing.KubeletLeaseNamespace), kept there by kubeNodeLeaseDir.
	kubeletLeaseRole = "fenced-kubelet-leases"
	// The operators' ClusterRole and Role (pkg/admin/rbac.go): bound to
	// nobody by the manifests.
	operatorRole     = "fenced-operator"
	kubeNodeLeaseDir = "deploy/daemonset/base/kube-node-lease"
	rbacFile         = "deploy/daemonset/base/rbac.yaml"
	// The admission policy that lets only a node's own agent write its
	// key Lease (publish.PolicyName).
	policyFile  = "deploy/daemonset/base/agent-identity-policy.yaml"
	fencerLabel = "node-restriction.kubernetes.io/fenced-fencer"
	// watchdogLabel picks the nodes of the watchdog DaemonSet
	// (components/watchdog), watchdogDaemonSet.
	watchdogLabel     = "node-restriction.kubernetes.io/fenced-watchdog"
	watchdogDaemonSet = "fenced-watchdog"
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
// no VolumeAttachment of the node is left), pkg/stale's informers
// (stale.PolicyRules) and publish.PolicyInForce's reads (policyCheckRules).
// Nodes list/watch come with the observer role, which fencers are bound to
// as well.
func fencerRules() []rbacv1.PolicyRule {
	rules := append(taint.PolicyRules(),
		rbacv1.PolicyRule{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"get", "list", "watch"}})
	rules = append(rules, stale.PolicyRules()...)
	return append(rules, policyCheckRules()[0])
}

// policyCheckRules: publish.PolicyInForce and OrderPolicyInForce get the
// ValidatingAdmissionPolicies and bindings named publish.PolicyName and
// publish.OrderPolicyName, nothing else (cluster-scoped).
// TestAgentIdentityPolicy runs them with the fencer's own token.
func policyCheckRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
			ResourceNames: []string{publish.PolicyName, publish.OrderPolicyName}, Verbs: []string{"get"}},
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
// (informer: list/watch; acquire: create/update; release: delete), its
// informer on the pause ConfigMap there (that object only: list and watch by
// metadata.name), and the fence history (taint.AppendHistory: get and update
// that one ConfigMap, create it when absent — a create cannot name its object).
func leaseRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{taint.PauseConfigMap}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{taint.HistoryConfigMap}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
	}
}

// kubeletLeaseRules: pkg/fencing's informer on the kubelets' node Leases
// (list/watch) and its read of the target's Lease right before a taint
// write (get), in fencing.KubeletLeaseNamespace only. Read only: those
// Leases are the kubelets' word, never the fencer's.
func kubeletLeaseRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}},
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
	wantNames("ClusterRoles", keys(r.clusterRoles), observerCR, fencerCR, operatorRole)
	// The operators' roles are bound by whoever installs fenced, to its
	// operators: no binding of them ships.
	wantNames("ClusterRoleBindings", keys(r.clusterRoleBindings), observerCR, fencerCR)
	wantNames("Roles", keys(r.roles), leaseRole, agentLeaseRole, kubeletLeaseRole, operatorRole)
	wantNames("RoleBindings", keys(r.roleBindings), leaseRole, agentLeaseRole, kubeletLeaseRole)

	roleRules := func(name string) []rbacv1.PolicyRule {
		ro := r.roles[name]
		if ro == nil {
			return nil
		}
		// The Roles live where the agents write and the fencers look for
		// their Leases, and where the kubelets renew theirs.
		if want, why := roleNamespace(name); ro.Namespace != want {
			t.Errorf("Role %s is in namespace %q, want %q (%s)", name, ro.Namespace, want, why)
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
		{"Role " + kubeletLeaseRole, roleRules(kubeletLeaseRole), kubeletLeaseRules()},
		{"ClusterRole " + operatorRole + " (admin.OperatorClusterRules)", rulesOf(r.clusterRoles[operatorRole]), admin.OperatorClusterRules()},
		{"Role " + operatorRole + " (admin.OperatorNamespaceRules)", roleRules(operatorRole), admin.OperatorNamespaceRules()},
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
		// Fencers only: an observer decides nothing on a kubelet's word.
		"RoleBinding " + kubeletLeaseRole: {fencing.KubeletLeaseNamespace, ref("Role", kubeletLeaseRole), []rbacv1.Subject{sa(fencerSA)}},
	} {
		if g := got[name]; !reflect.DeepEqual(g, want) {
			t.Errorf("%s in %s = %+v, want %+v", name, rbacFile, g, want)
		}
	}
}

// roleNamespace is where the Role (and RoleBinding) name belongs, and why:
// the kubelets' Leases' namespace for kubeletLeaseRole, the lease namespace
// for the others.
func roleNamespace(name string) (ns, why string) {
	if name == kubeletLeaseRole {
		return fencing.KubeletLeaseNamespace, "where the fencer watches the kubelets' Leases"
	}
	return config.DefaultLeaseNamespace, "fencer.leaseNamespace's default"
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

// grants reports whether the RBAC objects bind ServiceAccount sa (of
// fenced's namespace) to a rule allowing verb on group/resource — in
// namespace ns ("" for all namespaces, which only a ClusterRoleBinding
// grants), on the object named name ("" for any, as list and watch ask).
func (r rbacObjects) grants(sa, verb, group, resource, ns, name string) bool {
	bound := func(subjects []rbacv1.Subject) bool {
		return slices.Contains(subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace})
	}
	allow := func(rules []rbacv1.PolicyRule) bool {
		return slices.ContainsFunc(rules, func(ru rbacv1.PolicyRule) bool {
			return (slices.Contains(ru.Verbs, verb) || slices.Contains(ru.Verbs, rbacv1.VerbAll)) &&
				slices.Contains(ru.APIGroups, group) && slices.Contains(ru.Resources, resource) &&
				(len(ru.ResourceNames) == 0 || name != "" && slices.Contains(ru.ResourceNames, name))
		})
	}
	clusterRole := func(name string) []rbacv1.PolicyRule {
		if cr := r.clusterRoles[name]; cr != nil {
			return cr.Rules
		}
		return nil
	}
	for _, b := range r.clusterRoleBindings {
		if bound(b.Subjects) && b.RoleRef.Kind == "ClusterRole" && allow(clusterRole(b.RoleRef.Name)) {
			return true
		}
	}
	if ns == "" {
		return false
	}
	for _, b := range r.roleBindings {
		if b.Namespace != ns || !bound(b.Subjects) {
			continue
		}
		switch b.RoleRef.Kind {
		case "ClusterRole":
			if allow(clusterRole(b.RoleRef.Name)) {
				return true
			}
		case "Role":
			if ro := r.roles[b.RoleRef.Name]; ro != nil && ro.Namespace == ns && allow(ro.Rules) {
				return true
			}
		}
	}
	return false
}

// logSignal is a slog handler that closes ch once a record with message
// msg is logged, and drops everything.
type logSignal struct {
	msg  string
	once *sync.Once
	ch   chan struct{}
}

func (h logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logSignal) WithGroup(string) slog.Handler      { return h }

// runFencer runs pkg/fencing's fencer (no BMC, no gossip: what it does
// before any node needs it) and pkg/stale's report, as pkg/agent runs them
// on a fencer, with client until their informers have synced — they log
// "fencer started" and "stale volumeattachment report started" then — and
// until every condition of until holds, and stops them. Their informers
// must sync, and the conditions hold, within timeout; an informer they may
// not list or watch never syncs.
func runFencer(t *testing.T, client kubernetes.Interface, timeout time.Duration, until ...func() bool) {
	t.Helper()
	started, staleStarted := make(chan struct{}), make(chan struct{})
	// The informers as the agent builds them: one cluster-scoped factory,
	// the fencer's Lease factories from fencing.NewInformers.
	cluster := informers.NewSharedInformerFactory(client, 0)
	inf, leaseFactories := fencing.NewInformers(client, cluster, config.DefaultLeaseNamespace)
	f, err := fencing.New(fencing.Config{
		Identity: "fencer-under-test", Client: client, Informers: inf, Inventory: &device.Inventory{}, Members: noMembers{}, Recorder: record.NewFakeRecorder(100),
		LeaseNamespace: config.DefaultLeaseNamespace,
		Logger:         slog.New(logSignal{msg: "fencer started", once: new(sync.Once), ch: started}),
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := stale.New(stale.Config{
		Client: client, Informers: stale.NewInformers(cluster), Recorder: record.NewFakeRecorder(100),
		Logger: slog.New(logSignal{msg: "stale volumeattachment report started", once: new(sync.Once), ch: staleStarted}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factories := append(leaseFactories, cluster)
	for _, fa := range factories {
		fa.Start(ctx.Done())
	}
	done, staleDone := make(chan error, 1), make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	go func() { staleDone <- rep.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		<-staleDone
		for _, fa := range factories {
			fa.Shutdown()
		}
	}()
	deadline := time.After(timeout)
	for _, w := range []struct {
		what    string
		started chan struct{}
		done    chan error
	}{{"the fencer", started, done}, {"the stale volumeattachment report", staleStarted, staleDone}} {
		select {
		case <-w.started:
		case err := <-w.done:
			t.Fatalf("%s stopped before its informers synced: %v", w.what, err)
		case <-deadline:
			t.Fatalf("%s's informers did not sync within %s: it may not list or watch what one of them needs", w.what, timeout)
		}
	}
	for i, cond := range until {
		for !cond() {
			select {
			case <-deadline:
				t.Fatalf("condition %d of the fencer's run did not hold within %s", i+1, timeout)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// noMembers is a gossip ring with no one in it.
type noMembers struct{}

func (noMembers) Member(string) (heartbeat.Member, bool) { return heartbeat.Member{}, false }
func (noMembers) Alive() int                             { return 0 }
func (noMembers) Challenge(context.Context, string, string) (heartbeat.Proof, error) {
	return heartbeat.Proof{}, heartbeat.ErrNoProof
}

// Opt-in RBAC: fencers may delete stale VolumeAttachments only with this
// component (deploy/daemonset/components/delete-stale-volumeattachments).
const (
	deleteStaleDir = "deploy/daemonset/components/delete-stale-volumeattachments"
	deleteStaleCR  = "fenced-fencer-delete-stale-volumeattachments"
)

// renderWithDeleteOptIn renders overlays/in-cluster-fencers with the
// opt-in component, as a user's overlay would.
func renderWithDeleteOptIn(t *testing.T, kubectl string) ([]byte, []k8sruntime.Object) {
	t.Helper()
	dir := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(dir, path(t, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n",
		rel("deploy/daemonset/overlays/in-cluster-fencers"), rel(deleteStaleDir))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := run(t, nil, kubectl, "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize (in-cluster-fencers + %s): %v\n%s", deleteStaleDir, err, stderr)
	}
	return []byte(out), decodeObjects(t, "kubectl kustomize (in-cluster-fencers + "+deleteStaleDir+")", []byte(out))
}

// TestDeleteStaleOptIn: the base never lets anyone delete a
// VolumeAttachment; the opt-in component adds exactly what the delete path
// needs (stale.DeletePolicyRules), for the fencer ServiceAccount only, and
// nothing else.
func TestDeleteStaleOptIn(t *testing.T) {
	base := collectRBAC(decodeObjects(t, rbacFile, readFile(t, rbacFile)))
	for _, sa := range []string{observerSA, fencerSA} {
		if base.grants(sa, "delete", "storage.k8s.io", "volumeattachments", "", "") {
			t.Errorf("%s grants %s delete on volumeattachments: that is the opt-in %s", rbacFile, sa, deleteStaleDir)
		}
	}
	kubectl := kubectlPath(t)
	_, objs := renderWithDeleteOptIn(t, kubectl)
	got := collectRBAC(objs)
	cr := got.clusterRoles[deleteStaleCR]
	if cr == nil || !reflect.DeepEqual(cr.Rules, stale.DeletePolicyRules()) {
		t.Errorf("ClusterRole %s = %+v, want the rules stale.DeletePolicyRules()", deleteStaleCR, cr)
	}
	b := got.clusterRoleBindings[deleteStaleCR]
	wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: fencerSA, Namespace: namespace}}
	if b == nil || b.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: deleteStaleCR}) || !reflect.DeepEqual(b.Subjects, wantSubjects) {
		t.Errorf("ClusterRoleBinding %s = %+v, want ClusterRole %s bound to %v", deleteStaleCR, b, deleteStaleCR, wantSubjects)
	}
	if !got.grants(fencerSA, "delete", "storage.k8s.io", "volumeattachments", "", "") || got.grants(observerSA, "delete", "storage.k8s.io", "volumeattachments", "", "") {
		t.Errorf("with the opt-in the fencer must be able to delete VolumeAttachments, the observer not")
	}
	// Everything else is the base's.
	delete(got.clusterRoles, deleteStaleCR)
	delete(got.clusterRoleBindings, deleteStaleCR)
	for _, pair := range [][2]any{
		{got.clusterRoles, base.clusterRoles}, {got.clusterRoleBindings, base.clusterRoleBindings},
		{got.roles, base.roles}, {got.roleBindings, base.roleBindings},
	} {
		if !sameRBAC(pair[0], pair[1]) {
			t.Errorf("the opt-in changes more than its own role: %v", reflect.ValueOf(pair[0]).MapKeys())
		}
	}
}

// TestFencerCallsAllowed runs pkg/fencing's fencer against a fake API
// server until its informers have synced, then checks every call it made
// against what rbac.yaml grants the fencer ServiceAccount. It asks the code,
// not a list: an informer added to the fencer fails here until the
// manifest grants its list and watch, in its namespace.
//
// One Node is NotReady with no power device in the inventory: a suspect
// the fencer watches the kubelet Lease of, one node's at a time.
func TestFencerCallsAllowed(t *testing.T) {
	r := collectRBAC(decodeObjects(t, rbacFile, readFile(t, rbacFile)))
	client := fake.NewClientset(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "suspect", CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
			LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute))}}},
	})
	kubeletLease := func(verb string) func(a k8stesting.Action) bool {
		return func(a k8stesting.Action) bool {
			return a.GetVerb() == verb && a.GetResource().Resource == "leases" && a.GetNamespace() == fencing.KubeletLeaseNamespace
		}
	}
	runFencer(t, client, 30*time.Second, func() bool { return slices.ContainsFunc(client.Actions(), kubeletLease("watch")) })

	seen := map[string]bool{}
	for _, a := range client.Actions() {
		res := a.GetResource()
		resource := res.Resource
		if a.GetSubresource() != "" {
			resource += "/" + a.GetSubresource()
		}
		name := ""
		switch g := a.(type) {
		case k8stesting.GetAction:
			name = g.GetName()
		case k8stesting.ListAction:
			// The API server authorizes a list or watch by metadata.name
			// as a request for that one object (resourceNames).
			name, _ = g.GetListRestrictions().Fields.RequiresExactMatch("metadata.name")
		case k8stesting.WatchAction:
			name, _ = g.GetWatchRestrictions().Fields.RequiresExactMatch("metadata.name")
		}
		call := fmt.Sprintf("%s %s.%s %q in %q", a.GetVerb(), resource, res.Group, name, a.GetNamespace())
		if seen[call] {
			continue
		}
		seen[call] = true
		if r.grants(fencerSA, a.GetVerb(), res.Group, resource, a.GetNamespace(), name) {
			t.Logf("granted: %s", call)
		} else {
			t.Errorf("the fencer calls %s, which %s does not grant %s", call, rbacFile, fencerSA)
		}
	}
	// The kubelets' heartbeats, where they are: the suspect's Lease alone.
	for _, verb := range []string{"list", "watch"} {
		if !slices.ContainsFunc(client.Actions(), kubeletLease(verb)) {
			t.Errorf("the fencer did not %s the suspect's Lease in %s: are kubelet Leases no longer watched? Then drop %s", verb, fencing.KubeletLeaseNamespace, kubeletLeaseRole)
		}
	}
	if !seen[`watch leases.coordination.k8s.io "suspect" in "`+fencing.KubeletLeaseNamespace+`"`] {
		t.Errorf("the fencer did not watch the suspect's kubelet Lease by its name (a field selector): %v", seen)
	}
}
