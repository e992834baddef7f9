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
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/test/cluster"
)

// hostGroup is the group of the host credentials of systemd-run fencers in
// deploy/systemd/README.md, bound there to the fencer's roles.
const hostGroup = "fenced:fencers"

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
		!slices.Equal(ops, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) {
		t.Errorf("matchConstraints rule %+v: want CREATE and UPDATE of coordination.k8s.io leases", r)
	}
	if len(policy.Spec.MatchConditions) != 1 || !strings.Contains(policy.Spec.MatchConditions[0].Expression, "'"+publish.LeasePrefix+"'") {
		t.Errorf("matchConditions %+v: want one, on the name prefix %q", policy.Spec.MatchConditions, publish.LeasePrefix)
	}
}

// TestAgentIdentityPolicy applies the base to a real kube-apiserver and
// proves, with real credentials and publish.Publish, that only a node's own
// identity may write that node's key Lease: a ServiceAccount token bound to
// a Pod (or a Node) on that node, or a host credential named
// fenced:node:<node>; and only with spec.holderIdentity = <node>. Every
// other identity, cluster admins included, is refused. It also checks
// publish.PolicyInForce before and after, with the fencer's own token.
func TestAgentIdentityPolicy(t *testing.T) {
	kubectl := kubectlPath(t) // skips with -short
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := cluster.MustStart(ctx, t, cluster.Options{NoScheduler: true})
	admin := c.Client()
	kc := func(stdin []byte, args ...string) {
		t.Helper()
		if stdout, stderr, err := run(t, stdin, kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr)
		}
	}

	// (e) Before the base: not in force.
	if err := publish.PolicyInForce(ctx, admin); !errors.Is(err, publish.ErrPolicyNotInForce) {
		t.Fatalf("PolicyInForce before the policy is installed = %v, want an error wrapping ErrPolicyNotInForce", err)
	}

	base, _ := render(t, kubectl, "deploy/daemonset/base")
	kc(base, "apply", "-f", "-")
	if err := publish.PolicyInForce(ctx, admin); err != nil {
		t.Fatalf("PolicyInForce after applying the base: %v", err)
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
		tr, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600), BoundObjectRef: ref},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest for %s: %v", sa, err)
		}
		cfg := c.RESTConfig()
		cfg.BearerToken = tr.Status.Token
		return kubernetes.NewForConfigOrDie(cfg)
	}
	podToken := func(t *testing.T, sa, node string) kubernetes.Interface {
		p := pods[node]
		return tokenClient(t, sa, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID})
	}
	userClient := func(t *testing.T, user string, groups ...string) kubernetes.Interface {
		t.Helper()
		kubeconfig, err := c.UserKubeconfig(user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		return kubernetes.NewForConfigOrDie(cfg)
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
	// earlier one: deletes are not the policy's business), then replaces
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
	}
	// denied: the write fails, refused by the policy (not by RBAC) with a
	// message containing want.
	denied := func(t *testing.T, what string, err error, want string) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: admitted, want denied by %s", what, publish.PolicyName)
		case !deniedByPolicy(err):
			t.Errorf("%s: %v; want a denial by %s", what, err, publish.PolicyName)
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
		if err := publish.PolicyInForce(ctx, cl); err != nil {
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
		if err := publish.PolicyInForce(ctx, cl); err == nil {
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
	kc(nil, "create", "clusterrolebinding", "fenced-observer-hosts", "--clusterrole="+observerCR, "--group="+hostGroup)
	kc(nil, "create", "clusterrolebinding", "fenced-fencer-hosts", "--clusterrole="+fencerCR, "--group="+hostGroup)
	kc(nil, "-n", namespace, "create", "rolebinding", "fenced-fencer-leases-hosts", "--role="+leaseRole, "--group="+hostGroup)
	kc(nil, "-n", namespace, "create", "rolebinding", "fenced-agent-leases-hosts", "--role="+agentLeaseRole, "--group="+hostGroup)
	t.Run("host-user-fenced:node:node-a", func(t *testing.T) {
		cl := userClient(t, "fenced:node:node-a", hostGroup)
		whoami(t, cl)
		admitted(t, cl, "node-a")
		otherNodes(t, cl, "fenced:node:node-a, bound to node node-a")
		wrongHolder(t, cl, "node-a")
		if err := publish.PolicyInForce(ctx, cl); err != nil {
			t.Errorf("PolicyInForce as a systemd fencer: %v", err)
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

	// The policy guards agent key Leases in fenced's namespace only: power
	// Leases there and Leases elsewhere are not its business.
	t.Run("outside-the-policy", func(t *testing.T) {
		for _, w := range []struct{ ns, name string }{{namespace, "fenced-power-node-a"}, {"default", publish.LeaseName("node-a")}} {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: w.name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone")}}
			if _, err := admin.CoordinationV1().Leases(w.ns).Create(ctx, l, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating Lease %s/%s as admin: %v", w.ns, w.name, err)
			}
		}
	})

	// (e) Without its binding the policy is not in force.
	if err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, publish.PolicyName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := publish.PolicyInForce(ctx, admin); !errors.Is(err, publish.ErrPolicyNotInForce) {
		t.Errorf("PolicyInForce without the binding = %v, want an error wrapping ErrPolicyNotInForce", err)
	}
}

// deniedByPolicy: err is the agent identity policy's refusal.
func deniedByPolicy(err error) bool {
	return err != nil && apierrors.IsForbidden(err) &&
		strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+publish.PolicyName+"'")
}
