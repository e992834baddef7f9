package deploy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/vocab"
)

// hostGroup is the group of the host credentials of systemd-run fencers in
// deploy/systemd/README.md, bound there to the fencer's roles.
const hostGroup = "fenced:fencers"

// hostBindings are deploy/systemd/README.md's commands binding hostGroup to
// the fencer's roles, word for word (TestSystemdREADMEBindings):
// TestAgentIdentityPolicy runs them.
var hostBindings = []string{
	"kubectl create clusterrolebinding fenced-observer-hosts --clusterrole=" + observerCR + " --group=" + hostGroup,
	"kubectl create clusterrolebinding fenced-fencer-hosts --clusterrole=" + fencerCR + " --group=" + hostGroup,
	"kubectl -n " + namespace + " create rolebinding fenced-fencer-leases-hosts --role=" + leaseRole + " --group=" + hostGroup,
	"kubectl -n " + namespace + " create rolebinding fenced-agent-leases-hosts --role=" + agentLeaseRole + " --group=" + hostGroup,
	"kubectl -n " + fencing.KubeletLeaseNamespace + " create rolebinding fenced-kubelet-leases-hosts --role=" + kubeletLeaseRole + " --group=" + hostGroup,
}

// TestSystemdREADMEBindings: the README binds group fenced:fencers with
// exactly the commands TestAgentIdentityPolicy runs — one of the fencer's
// roles left out there is a systemd fencer that cannot start.
func TestSystemdREADMEBindings(t *testing.T) {
	const readme = "deploy/systemd/README.md"
	var got []string
	for _, line := range strings.Split(string(readFile(t, readme)), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "kubectl" && strings.Contains(line, "binding") && strings.Contains(line, "--group="+hostGroup) {
			got = append(got, strings.Join(f, " "))
		}
	}
	if !slices.Equal(got, hostBindings) {
		t.Errorf("%s binds group %s with\n  %s\nwant (what test/deploy runs)\n  %s", readme, hostGroup,
			strings.Join(got, "\n  "), strings.Join(hostBindings, "\n  "))
	}
}

// TestAgentIdentityPolicyFile checks the shape of agent-identity-policy.yaml
// against the names the code uses; TestAgentIdentityPolicy checks what it
// does on a real API server.
func TestAgentIdentityPolicyFile(t *testing.T) {
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	var binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, o := range decodeObjects(t, policyFile, readFile(t, policyFile)) {
		switch o := o.(type) {
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			policy = o
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			binding = o
		default:
			t.Errorf("%s: unexpected %T", policyFile, o)
		}
	}
	if policy == nil || binding == nil {
		t.Fatalf("%s: want a ValidatingAdmissionPolicy and its binding", policyFile)
	}
	if policy.Name != publish.PolicyName || binding.Name != publish.PolicyName || binding.Spec.PolicyName != publish.PolicyName {
		t.Errorf("policy %q, binding %q of policy %q; publish.PolicyInForce looks for %q", policy.Name, binding.Name, binding.Spec.PolicyName, publish.PolicyName)
	}
	if fp := policy.Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", fp)
	}
	if !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("validationActions %v, want [Deny]", binding.Spec.ValidationActions)
	}
	if ns := policyNamespace(binding); ns != config.DefaultLeaseNamespace {
		t.Errorf("the binding covers namespace %q; fencer.leaseNamespace defaults to %q", ns, config.DefaultLeaseNamespace)
	}
	mc := policy.Spec.MatchConstraints
	if mc == nil || len(mc.ResourceRules) != 1 {
		t.Fatalf("matchConstraints %+v: want one rule, for Leases", mc)
	}
	r := mc.ResourceRules[0]
	ops := slices.Clone(r.Operations)
	slices.Sort(ops)
	if !slices.Equal(r.APIGroups, []string{"coordination.k8s.io"}) || !slices.Equal(r.Resources, []string{"leases"}) ||
		!slices.Equal(ops, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Delete, admissionregistrationv1.Update}) {
		t.Errorf("matchConstraints rule %+v: want CREATE, UPDATE and DELETE of coordination.k8s.io leases", r)
	}
	// One match condition, on the names of the agents' key Leases and of
	// the fencers' power Leases: every other Lease is left alone.
	if len(policy.Spec.MatchConditions) != 1 ||
		!strings.Contains(policy.Spec.MatchConditions[0].Expression, "'"+publish.LeasePrefix+"'") ||
		!strings.Contains(policy.Spec.MatchConditions[0].Expression, "'"+fencing.LeasePrefix+"'") {
		t.Errorf("matchConditions %+v: want one, on the name prefixes %q and %q", policy.Spec.MatchConditions, publish.LeasePrefix, fencing.LeasePrefix)
	}
	// Fencers, for the power Leases: the ServiceAccount of the namespace
	// the binding covers (whatever an overlay makes it) and the systemd
	// fencers' group.
	var fencer string
	for _, v := range policy.Spec.Variables {
		if v.Name == "fencer" {
			fencer = v.Expression
		}
	}
	for _, want := range []string{"'system:serviceaccount:' + request.namespace + ':" + fencerSA + "'", "'" + hostGroup + "'"} {
		if !strings.Contains(fencer, want) {
			t.Errorf("variable fencer %q: want it to contain %s", fencer, want)
		}
	}
}

// TestAgentIdentityPolicy applies the base to a real kube-apiserver and
// proves, with real credentials and publish.Publish, that only a node's own
// identity may write that node's key Lease: a ServiceAccount token bound to
// a Pod (or a Node) on that node, or a host credential named
// fenced:node:<node>; and only with spec.holderIdentity = <node>. Every
// other identity, cluster admins included, is refused. Likewise (f) only
// fencers — the ServiceAccount fenced-fencer of fenced's namespace, or
// group fenced:fencers — may create, update or delete the power Leases
// fenced-power-*; observers, systemd observers, a fenced-fencer
// ServiceAccount of another namespace and cluster admins may not. Other
// Leases are left alone. It also checks publish.PolicyInForce before and
// after, with the fencer's own token.
func TestAgentIdentityPolicy(t *testing.T) {
	kubectl := kubectlPath(t) // skips with -short
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true})
	admin := c.Client()
	kc := func(stdin []byte, args ...string) {
		t.Helper()
		if stdout, stderr, err := run(t, stdin, kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr)
		}
	}

	// (e) Before the base: not in force.
	if err := publish.PolicyInForce(ctx, admin, namespace); !errors.Is(err, publish.ErrPolicyNotInForce) {
		t.Fatalf("PolicyInForce before the policy is installed = %v, want an error wrapping ErrPolicyNotInForce", err)
	}

	base, _ := render(t, kubectl, "deploy/daemonset/base")
	kc(base, "apply", "-f", "-")
	if err := publish.PolicyInForce(ctx, admin, namespace); err != nil {
		t.Fatalf("PolicyInForce after applying the base: %v", err)
	}
	if err := publish.OrderPolicyInForce(ctx, admin, namespace); err != nil {
		t.Fatalf("OrderPolicyInForce after applying the base: %v", err)
	}
	// The API server compiles a new policy asynchronously: wait until it
	// refuses a (dry-run) write it must refuse.
	probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: publish.LeaseName("probe")},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("probe")}}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := admin.CoordinationV1().Leases(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return deniedByPolicy(err), nil
	}); err != nil {
		t.Fatalf("the API server does not enforce %s a minute after it was applied", publish.PolicyName)
	}

	// Nodes, and one agent Pod on each: an observer on node-a, a fencer on
	// node-b. There is no kubelet: the Pods stay Pending, which is all a
	// bound token needs.
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := map[string]*corev1.Pod{}
	for _, p := range []struct{ sa, node string }{{observerSA, "node-a"}, {fencerSA, "node-b"}} {
		pod, err := admin.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.sa + "-" + p.node},
			Spec: corev1.PodSpec{ServiceAccountName: p.sa, NodeName: p.node,
				Containers: []corev1.Container{{Name: "fenced", Image: "registry.invalid/fenced"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[p.node] = pod
	}

	// Clients for every kind of identity.
	tokenClient := func(t *testing.T, sa string, ref *authenticationv1.BoundObjectReference) kubernetes.Interface {
		t.Helper()
		return serviceAccountClient(ctx, t, c, sa, ref)
	}
	podToken := func(t *testing.T, sa, node string) kubernetes.Interface {
		p := pods[node]
		return tokenClient(t, sa, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID})
	}
	userClient := func(t *testing.T, user string, groups ...string) kubernetes.Interface {
		t.Helper()
		cl, err := c.UserClient(user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	// whoami returns what the API server authenticated the client as.
	whoami := func(t *testing.T, cl kubernetes.Interface) authenticationv1.UserInfo {
		t.Helper()
		r, err := cl.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("authenticated as %s, groups %v, extra %v", r.Status.UserInfo.Username, r.Status.UserInfo.Groups, r.Status.UserInfo.Extra)
		return r.Status.UserInfo
	}
	nodeClaim := func(u authenticationv1.UserInfo) []string {
		return u.Extra["authentication.kubernetes.io/node-name"]
	}

	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	publishAs := func(cl kubernetes.Interface, node string) error {
		return publish.Publish(ctx, cl, namespace, node, "boot-"+node, key.Public(), time.Now())
	}
	// admitted: node's identity creates its key Lease (after removing any
	// earlier one: deleting a key Lease is not the policy's business), then replaces
	// it, and the Lease reads back as node's key.
	admitted := func(t *testing.T, cl kubernetes.Interface, node string) {
		t.Helper()
		if err := admin.CoordinationV1().Leases(namespace).Delete(ctx, publish.LeaseName(node), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		for _, op := range []string{"create", "update"} {
			if err := publishAs(cl, node); err != nil {
				t.Fatalf("publishing node %s's key (%s) as node %s's identity: %v", node, op, node, err)
			}
		}
		l, err := admin.CoordinationV1().Leases(namespace).Get(ctx, publish.LeaseName(node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		k, err := publish.FromLease(l)
		if err != nil || k.Node != node || k.BootID != "boot-"+node || !slices.Equal(k.Key, key.Public()) {
			t.Fatalf("Lease %s reads as %+v, %v", l.Name, k, err)
		}
		// What the agent found of its kubelet's graceful shutdown rides
		// on the same Lease, written by the same identity.
		for _, g := range []vocab.GracefulShutdown{vocab.GracefulNone, vocab.GracefulKubeletDelayLock} {
			if err := publish.PublishGracefulShutdown(ctx, cl, namespace, node, g); err != nil {
				t.Fatalf("publishing node %s's graceful shutdown %s as node %s's identity: %v", node, g, node, err)
			}
		}
		if l, err = admin.CoordinationV1().Leases(namespace).Get(ctx, publish.LeaseName(node), metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if n, g, ok := publish.GracefulShutdownOf(l); !ok || n != node || g != vocab.GracefulKubeletDelayLock {
			t.Fatalf("Lease %s: graceful shutdown %s %s %v", l.Name, n, g, ok)
		}
	}
	// denied: the write fails, refused by the policy (not by RBAC) with a
	// message containing want.
	denied := func(t *testing.T, what string, err error, want string) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: admitted, want denied by %s", what, publish.PolicyName)
		case !deniedByPolicy(err):
			t.Errorf("%s: %v; want a denial by %s or %s", what, err, publish.PolicyName, publish.OrderPolicyName)
		case !strings.Contains(err.Error(), want):
			t.Errorf("%s: %v; want a message containing %q", what, err, want)
		default:
			t.Logf("%s: denied: %v", what, err)
		}
	}
	// wrongHolder: cl, bound to node, writes node's own Lease naming
	// another holder, or none — on update and on create.
	wrongHolder := func(t *testing.T, cl kubernetes.Interface, node string) {
		t.Helper()
		leases := cl.CoordinationV1().Leases(namespace)
		l, err := leases.Get(ctx, publish.LeaseName(node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.Spec.HolderIdentity = ptr.To("node-b")
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		denied(t, "update with holderIdentity node-b", err, "spec.holderIdentity must be the writing node "+node+", not 'node-b'")
		fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: publish.LeaseName(node)}}
		if err := admin.CoordinationV1().Leases(namespace).Delete(ctx, fresh.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = leases.Create(ctx, fresh, metav1.CreateOptions{})
		denied(t, "create without holderIdentity", err, "spec.holderIdentity must be the writing node "+node+", not unset")
		fresh.Spec.HolderIdentity = ptr.To("node-b")
		_, err = leases.Create(ctx, fresh, metav1.CreateOptions{})
		denied(t, "create with holderIdentity node-b", err, "not 'node-b'")
	}
	otherNodes := func(t *testing.T, cl kubernetes.Interface, caller string) {
		t.Helper()
		// node-b's Lease exists (update path), node-c's does not (create).
		denied(t, "publishing node-b's key", publishAs(cl, "node-b"),
			"fenced-agent-node-b may only be written by node node-b's own agent; caller is "+caller)
		denied(t, "publishing node-c's key", publishAs(cl, "node-c"),
			"fenced-agent-node-c may only be written by node node-c's own agent; caller is "+caller)
		denied(t, "publishing node-b's graceful shutdown", publish.PublishGracefulShutdown(ctx, cl, namespace, "node-b", vocab.GracefulUnknown),
			"fenced-agent-node-b may only be written by node node-b's own agent; caller is "+caller)
	}

	// The fencer on node-b publishes its own key first, so that node-b's
	// Lease exists for the update-path refusals below.
	t.Run("fencer-pod-token-node-b", func(t *testing.T) {
		cl := podToken(t, fencerSA, "node-b")
		if got := nodeClaim(whoami(t, cl)); !slices.Equal(got, []string{"node-b"}) {
			t.Fatalf("a token bound to a Pod on node-b carries node-name %v, want [node-b] (is ServiceAccountTokenPodNodeInfo on?)", got)
		}
		admitted(t, cl, "node-b")
		// A fencer is no exception: it cannot speak for another node.
		denied(t, "publishing node-a's key", publishAs(cl, "node-a"),
			"fenced-agent-node-a may only be written by node node-a's own agent; caller is system:serviceaccount:fenced-system:fenced-fencer, bound to node node-b")
		// (e) with the fencer's own RBAC.
		if err := publish.OrderPolicyInForce(ctx, cl, namespace); err != nil {
			t.Errorf("OrderPolicyInForce as the fencer: %v", err)
		}
		if err := publish.PolicyInForce(ctx, cl, namespace); err != nil {
			t.Errorf("PolicyInForce as the fencer: %v", err)
		}
	})

	// (a) The observer's token bound to its Pod on node-a.
	t.Run("observer-pod-token-node-a", func(t *testing.T) {
		cl := podToken(t, observerSA, "node-a")
		if got := nodeClaim(whoami(t, cl)); !slices.Equal(got, []string{"node-a"}) {
			t.Fatalf("a token bound to a Pod on node-a carries node-name %v, want [node-a] (is ServiceAccountTokenPodNodeInfo on?)", got)
		}
		admitted(t, cl, "node-a")
		otherNodes(t, cl, "system:serviceaccount:fenced-system:fenced-observer, bound to node node-a")
		wrongHolder(t, cl, "node-a")
		// Observers do not check the policy, and may not read it.
		if err := publish.PolicyInForce(ctx, cl, namespace); err == nil {
			t.Errorf("PolicyInForce as an observer succeeded: it may not read the policy")
		}
	})

	// A token bound to the Node object itself (kubectl create token
	// --bound-object-kind Node) carries the node too: a way for agents
	// outside a Pod (deploy/systemd) to hold a ServiceAccount identity
	// that speaks for their node only.
	t.Run("observer-node-token-node-a", func(t *testing.T) {
		n, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cl := tokenClient(t, observerSA, &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID})
		if got := nodeClaim(whoami(t, cl)); !slices.Equal(got, []string{"node-a"}) {
			t.Fatalf("a token bound to Node node-a carries node-name %v, want [node-a]", got)
		}
		admitted(t, cl, "node-a")
		otherNodes(t, cl, "system:serviceaccount:fenced-system:fenced-observer, bound to node node-a")
	})

	// (b) A systemd-run agent's host credential: user fenced:node:node-a,
	// with the fencer's RBAC through its group, bound the way
	// deploy/systemd/README.md says.
	for _, b := range hostBindings {
		kc(nil, strings.Fields(b)[1:]...)
	}
	// A kubelet's Lease, for the systemd fencer to read.
	if _, err := admin.CoordinationV1().Leases(fencing.KubeletLeaseNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("host-user-fenced:node:node-a", func(t *testing.T) {
		cl := userClient(t, "fenced:node:node-a", hostGroup)
		whoami(t, cl)
		admitted(t, cl, "node-a")
		otherNodes(t, cl, "fenced:node:node-a, bound to node node-a")
		wrongHolder(t, cl, "node-a")
		if err := publish.PolicyInForce(ctx, cl, namespace); err != nil {
			t.Errorf("PolicyInForce as a systemd fencer: %v", err)
		}
		// The kubelets' Leases: read (the fencer's informer and its read
		// before a taint write), never written.
		nodeLeases := cl.CoordinationV1().Leases(fencing.KubeletLeaseNamespace)
		if _, err := nodeLeases.List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("listing the kubelets' Leases as a systemd fencer: %v", err)
		}
		l, err := nodeLeases.Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading node-a's kubelet Lease as a systemd fencer: %v", err)
		}
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		if _, err := nodeLeases.Update(ctx, l, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("renewing node-a's kubelet Lease as a systemd fencer: %v, want Forbidden", err)
		}
	})

	// (c) Identities bound to no node, all with the RBAC to write Leases
	// there: refused by the policy, whichever node they name.
	for _, tc := range []struct {
		name, caller string
		client       func(t *testing.T) kubernetes.Interface
	}{
		{"unbound-observer-token", "system:serviceaccount:fenced-system:fenced-observer",
			func(t *testing.T) kubernetes.Interface { return tokenClient(t, observerSA, nil) }},
		{"unbound-fencer-token", "system:serviceaccount:fenced-system:fenced-fencer",
			func(t *testing.T) kubernetes.Interface { return tokenClient(t, fencerSA, nil) }},
		{"host-user-fenced:node-a", "fenced:node-a",
			func(t *testing.T) kubernetes.Interface { return userClient(t, "fenced:node-a", hostGroup) }},
		{"host-user-fenced:node:", "fenced:node:",
			func(t *testing.T) kubernetes.Interface { return userClient(t, "fenced:node:", hostGroup) }},
		{"host-user-system:node:node-a-in-fencer-group", "system:node:node-a",
			func(t *testing.T) kubernetes.Interface { return userClient(t, "system:node:node-a", hostGroup) }},
		{"cluster-admin", "admin", func(*testing.T) kubernetes.Interface { return admin }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := tc.client(t)
			u := whoami(t, cl)
			if got := nodeClaim(u); len(got) != 0 {
				t.Fatalf("carries node-name %v", got)
			}
			for _, node := range []string{"node-a", "node-c"} {
				denied(t, "publishing "+node+"'s key", publishAs(cl, node),
					publish.LeaseName(node)+" may only be written by node "+node+"'s own agent; caller is "+tc.caller+", bound to no node")
			}
		})
	}

	// (f) The fencers' power Leases: every agent holds create/update on
	// Leases in fenced's namespace (for its key Lease), so the policy
	// admits a create, update or delete of fenced-power-* only from a
	// fencer — the ServiceAccount fenced-fencer of fenced's namespace, or
	// the group fenced:fencers — whatever node it is bound to, if any.
	//
	// Systemd observers: group fenced:observers, bound the way
	// deploy/systemd/README.md says.
	const observerGroup = "fenced:observers"
	kc(nil, "create", "clusterrolebinding", "fenced-observer-observer-hosts", "--clusterrole="+observerCR, "--group="+observerGroup)
	kc(nil, "-n", namespace, "create", "rolebinding", "fenced-agent-leases-observer-hosts", "--role="+agentLeaseRole, "--group="+observerGroup)
	t.Run("host-user-observer-kubelet-leases", func(t *testing.T) {
		_, err := userClient(t, "fenced:node:node-c", observerGroup).CoordinationV1().Leases(fencing.KubeletLeaseNamespace).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("listing the kubelets' Leases as a systemd observer: %v, want Forbidden", err)
		}
	})
	// A ServiceAccount named fenced-fencer in another namespace, granted
	// the fencer's Lease Role in fenced's: its name alone makes no fencer.
	const tenant = "tenant"
	// For this test only, leases delete and deletecollection for the
	// observers and that ServiceAccount, as if some other Role gave it to
	// them: RBAC alone refuses them that, the policy must refuse it too.
	kc(nil, "-n", namespace, "create", "role", "test-lease-deleters", "--verb=delete,deletecollection", "--resource=leases.coordination.k8s.io")
	kc(nil, "-n", namespace, "create", "rolebinding", "test-lease-deleters", "--role=test-lease-deleters",
		"--serviceaccount="+namespace+":"+observerSA, "--group="+observerGroup, "--serviceaccount="+tenant+":"+fencerSA)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(tenant).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fencerSA}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc(nil, "-n", namespace, "create", "rolebinding", "tenant-fenced-fencer", "--role="+leaseRole, "--serviceaccount="+tenant+":"+fencerSA)
	tenantFencer := func(t *testing.T) kubernetes.Interface {
		t.Helper()
		tr, err := admin.CoreV1().ServiceAccounts(tenant).CreateToken(ctx, fencerSA, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := c.RESTConfig()
		cfg.BearerToken = tr.Status.Token
		return kubernetes.NewForConfigOrDie(cfg)
	}

	powerLease := fencing.LeasePrefix + "node-x"
	powerLeaseOf := func(holder string) *coordinationv1.Lease {
		now := metav1.NewMicroTime(time.Now())
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: powerLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](60), AcquireTime: &now, RenewTime: &now}}
	}
	// The fencer on node-b sets the stage for the refusals below.
	fencerB := podToken(t, fencerSA, "node-b")

	// Fencers: create, renew and release a power Lease, as pkg/fencing does.
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) kubernetes.Interface
	}{
		{"fencer-pod-token-node-b", func(*testing.T) kubernetes.Interface { return fencerB }},
		{"unbound-fencer-token", func(t *testing.T) kubernetes.Interface { return tokenClient(t, fencerSA, nil) }},
		{"host-user-fenced:node:node-a-in-fencer-group", func(t *testing.T) kubernetes.Interface {
			return userClient(t, "fenced:node:node-a", hostGroup)
		}},
	} {
		t.Run("power-lease-allowed/"+tc.name, func(t *testing.T) {
			cl := tc.client(t)
			u := whoami(t, cl)
			leases := cl.CoordinationV1().Leases(namespace)
			l, err := leases.Create(ctx, powerLeaseOf(u.Username), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create %s: %v", powerLease, err)
			}
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("update %s: %v", powerLease, err)
			}
			if err := leases.Delete(ctx, powerLease, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}}); err != nil {
				t.Fatalf("delete %s: %v", powerLease, err)
			}
		})
	}

	// Everyone who is no fencer, among them the node's own agent (on
	// node-a, whose fence order the tests below write).
	nonFencers := []struct {
		name, caller string
		client       func(t *testing.T) kubernetes.Interface
	}{
		{"observer-pod-token-node-a", "system:serviceaccount:fenced-system:fenced-observer",
			func(t *testing.T) kubernetes.Interface { return podToken(t, observerSA, "node-a") }},
		{"host-user-fenced:node:node-c-not-in-fencer-group", "fenced:node:node-c",
			func(t *testing.T) kubernetes.Interface { return userClient(t, "fenced:node:node-c", observerGroup) }},
		{"tenant-fenced-fencer-token", "system:serviceaccount:tenant:fenced-fencer", tenantFencer},
		{"cluster-admin", "admin", func(*testing.T) kubernetes.Interface { return admin }},
	}
	// Refused every write of a power Lease, including one whose name the
	// API server generates, and every delete.
	for _, tc := range nonFencers {
		t.Run("power-lease-denied/"+tc.name, func(t *testing.T) {
			cl := tc.client(t)
			if u := whoami(t, cl); u.Username != tc.caller {
				t.Fatalf("authenticated as %s, want %s", u.Username, tc.caller)
			}
			leases := cl.CoordinationV1().Leases(namespace)
			refusal := func(op string) string {
				return powerLease + " may only be " + op + " by a fencer (ServiceAccount " + namespace + "/" + fencerSA +
					" or group " + hostGroup + "); caller is " + tc.caller
			}

			// Create, while the Lease does not exist: in its own name, and
			// in the fencer's.
			_, err := leases.Create(ctx, powerLeaseOf(tc.caller), metav1.CreateOptions{})
			denied(t, "create "+powerLease, err, refusal("written"))
			_, err = leases.Create(ctx, powerLeaseOf("fencer-node-b"), metav1.CreateOptions{})
			denied(t, "create "+powerLease+" with holderIdentity fencer-node-b", err, refusal("written"))
			gen := powerLeaseOf(tc.caller)
			gen.Name, gen.GenerateName = "", fencing.LeasePrefix
			_, err = leases.Create(ctx, gen, metav1.CreateOptions{})
			denied(t, "create with generateName "+fencing.LeasePrefix, err, "may only be written by a fencer")

			// The fencer takes the Lease; the others may not take it
			// over, renew it, or release it.
			held, err := fencerB.CoordinationV1().Leases(namespace).Create(ctx, powerLeaseOf("fencer-node-b"), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("the fencer on node-b creating %s: %v", powerLease, err)
			}
			l, err := leases.Get(ctx, powerLease, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			l.Spec.HolderIdentity = ptr.To(tc.caller)
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			denied(t, "update "+powerLease+" to holderIdentity "+tc.caller, err, refusal("written"))
			l.Spec.HolderIdentity = ptr.To("fencer-node-b")
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now().Add(time.Hour)))
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			denied(t, "update "+powerLease+"'s renewTime", err, refusal("written"))
			denied(t, "delete "+powerLease, leases.Delete(ctx, powerLease, metav1.DeleteOptions{}), refusal("deleted"))
			denied(t, "deletecollection metadata.name="+powerLease,
				leases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "metadata.name=" + powerLease}),
				refusal("deleted"))

			after, err := fencerB.CoordinationV1().Leases(namespace).Get(ctx, powerLease, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s after the refusals: %v", powerLease, err)
			}
			if after.ResourceVersion != held.ResourceVersion {
				t.Errorf("%s changed: resourceVersion %s, the fencer left %s; holder %v", powerLease, after.ResourceVersion, held.ResourceVersion, *after.Spec.HolderIdentity)
			}
			if err := fencerB.CoordinationV1().Leases(namespace).Delete(ctx, powerLease, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("the fencer on node-b deleting %s: %v", powerLease, err)
			}
		})
	}

	// (g) Fence orders (fenced-order-<node>, the watchdog level): written
	// and withdrawn by a fencer as pkg/fencing does it (publish.WriteOrder,
	// WithdrawOrder); anyone else can neither order a node's reset nor take
	// a fencer's order back.
	t.Run("fence-order-allowed", func(t *testing.T) {
		for _, cl := range []kubernetes.Interface{fencerB, userClient(t, "fenced:node:node-a", hostGroup)} {
			if err := publish.WriteOrder(ctx, cl, namespace, "node-a", "boot-x", whoami(t, cl).Username); err != nil {
				t.Fatalf("a fencer writing a fence order: %v", err)
			}
			if withdrawn, err := publish.WithdrawOrder(ctx, cl, namespace, "node-a", "boot-x"); !withdrawn || err != nil {
				t.Fatalf("a fencer withdrawing its fence order: %v, %v", withdrawn, err)
			}
		}
	})
	orderLease := publish.OrderLeaseName("node-a")
	for _, tc := range nonFencers {
		t.Run("fence-order-denied/"+tc.name, func(t *testing.T) {
			cl := tc.client(t)
			refusal := func(op string) string {
				return orderLease + " may only be " + op + " by a fencer (ServiceAccount " + namespace + "/" + fencerSA +
					" or group " + hostGroup + "); caller is " + tc.caller
			}
			denied(t, "writing a fence order", publish.WriteOrder(ctx, cl, namespace, "node-a", "boot-x", tc.caller), refusal("written"))
			if err := publish.WriteOrder(ctx, fencerB, namespace, "node-a", "boot-x", "fencer-node-b"); err != nil {
				t.Fatalf("the fencer on node-b writing a fence order: %v", err)
			}
			_, err := publish.WithdrawOrder(ctx, cl, namespace, "node-a", "boot-x")
			denied(t, "withdrawing a fencer's fence order", err, refusal("deleted"))
			denied(t, "replacing a fencer's fence order", publish.WriteOrder(ctx, cl, namespace, "node-a", "boot-y", tc.caller), refusal("written"))
			if o, found, err := publish.ReadOrder(ctx, fencerB, namespace, "node-a"); !found || err != nil || o.BootID != "boot-x" {
				t.Fatalf("the fencer's order after the refusals: %+v, %v, %v", o, found, err)
			}
			if _, err := publish.WithdrawOrder(ctx, fencerB, namespace, "node-a", "boot-x"); err != nil {
				t.Fatalf("the fencer on node-b withdrawing its order: %v", err)
			}
		})
	}

	// The policy guards agent key Leases and power Leases in fenced's
	// namespace only, and deleting a key Lease not at all: any other Lease
	// there, and Leases of those names elsewhere, are not its business.
	t.Run("outside-the-policy", func(t *testing.T) {
		observer := podToken(t, observerSA, "node-a")
		for _, w := range []struct {
			ns, name string
			cl       kubernetes.Interface
		}{
			// Names that only look like the guarded ones, written by an
			// observer (it may write Leases in fenced's namespace).
			{namespace, "fenced-power", observer},
			{namespace, "fenced-powernode-a", observer},
			{namespace, "fenced-leader", observer},
			{namespace, "other-power-node-a", observer},
			// The guarded names, in another namespace.
			{"default", fencing.LeasePrefix + "node-a", admin},
			{"default", publish.LeaseName("node-a"), admin},
		} {
			leases := w.cl.CoordinationV1().Leases(w.ns)
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: w.name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone")}}
			l, err := leases.Create(ctx, l, metav1.CreateOptions{})
			if err != nil {
				t.Errorf("creating Lease %s/%s: %v", w.ns, w.name, err)
				continue
			}
			l.Spec.HolderIdentity = ptr.To("someone-else")
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Errorf("updating Lease %s/%s: %v", w.ns, w.name, err)
			}
			if err := admin.CoordinationV1().Leases(w.ns).Delete(ctx, w.name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("deleting Lease %s/%s as admin: %v", w.ns, w.name, err)
			}
		}
		// Deleting a key Lease: the observers' delete grant above makes
		// this one the policy's call, and it does not object.
		if err := publishAs(observer, "node-a"); err != nil {
			t.Fatal(err)
		}
		if err := observer.CoordinationV1().Leases(namespace).Delete(ctx, publish.LeaseName("node-a"), metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting key Lease %s as node-a's observer: %v", publish.LeaseName("node-a"), err)
		}
	})

	// (e) Without its binding the policy is not in force.
	if err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, publish.PolicyName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := publish.PolicyInForce(ctx, admin, namespace); !errors.Is(err, publish.ErrPolicyNotInForce) {
		t.Errorf("PolicyInForce without the binding = %v, want an error wrapping ErrPolicyNotInForce", err)
	}
}

// deniedByPolicy: err is the agent identity policy's refusal.
func deniedByPolicy(err error) bool {
	return err != nil && apierrors.IsForbidden(err) &&
		(strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+publish.PolicyName+"'") ||
			strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+publish.OrderPolicyName+"'"))
}
