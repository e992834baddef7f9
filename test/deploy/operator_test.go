package deploy

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// operatorUser is the person TestManifestsAgainstAPIServer binds to the
// operators' roles, as docs/operations.md says to.
const operatorUser = "alice"

// operatorNever: what the operators' roles must not allow, bound or not.
// The fencers' configuration is changed by whoever deploys fenced (a
// reload applies it to every fencer); Secrets hold the BMC passwords;
// the power Leases are the fencers' own and the key Leases each node's;
// deleting a Node or a VolumeAttachment is no operator command's.
var operatorNever = []query{
	{verb: "update", resource: "configmaps", name: "fenced-fencer-config", namespace: namespace},
	{verb: "patch", resource: "configmaps", name: "fenced-fencer-config", namespace: namespace},
	{verb: "delete", resource: "configmaps", name: "fenced-fencer-config", namespace: namespace},
	{verb: "delete", resource: "configmaps", name: taint.PauseConfigMap, namespace: namespace},
	{verb: "delete", resource: "configmaps", name: taint.HistoryConfigMap, namespace: namespace},
	{verb: "list", resource: "configmaps", namespace: namespace},
	{verb: "get", resource: "secrets", namespace: namespace},
	{verb: "list", resource: "secrets"},
	{verb: "create", resource: "leases.coordination.k8s.io", namespace: namespace},
	{verb: "update", resource: "leases.coordination.k8s.io", namespace: namespace},
	{verb: "delete", resource: "leases.coordination.k8s.io", namespace: namespace},
	{verb: "list", resource: "leases.coordination.k8s.io", namespace: "kube-system"},
	{verb: "delete", resource: "nodes"},
	{verb: "create", resource: "nodes"},
	{verb: "delete", resource: "volumeattachments.storage.k8s.io"},
	{verb: "create", resource: "pods", namespace: "default"},
	{verb: "update", resource: "daemonsets.apps", namespace: namespace},
	{verb: "create", resource: "clusterrolebindings.rbac.authorization.k8s.io"},
	{verb: "create", resource: "rolebindings.rbac.authorization.k8s.io", namespace: namespace},
}

// testOperatorRole checks the operators' roles on a cluster where the
// manifests are applied: bound to nobody, they let alice do nothing; bound
// to her as docs/operations.md says, she may do what the commands need
// (admin.OperatorClusterRules, admin.OperatorNamespaceRules) and nothing
// of operatorNever, and the commands themselves run with her credentials:
// pause, resume, exclude, include, status, history, and the taint, the
// Ready=False and the pod deletion that confirm writes.
func testOperatorRole(ctx context.Context, t *testing.T, c *cluster.Cluster, canI func(query) bool) {
	t.Helper()
	yes := append(queriesOf(admin.OperatorClusterRules(), ""), queriesOf(admin.OperatorNamespaceRules(), namespace)...)
	pause := query{verb: "update", resource: "configmaps", name: taint.PauseConfigMap, namespace: namespace}
	if canI(pause) {
		t.Fatalf("%s can %s before any binding: the roles must ship bound to nobody", operatorUser, pause)
	}

	// Bound as docs/operations.md says (kubectl create clusterrolebinding
	// / rolebinding … --user=alice).
	adminClient := c.Client()
	user := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operatorUser}}
	if _, err := adminClient.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: operatorRole + "-" + operatorUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: operatorRole}, Subjects: user,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminClient.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: operatorRole + "-" + operatorUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: operatorRole}, Subjects: user,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC's authorizer sees new bindings through an informer: wait.
	deadline := time.Now().Add(30 * time.Second)
	for !canI(pause) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still cannot %s 30 s after the bindings", operatorUser, pause)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, q := range yes {
		if !canI(q) {
			t.Errorf("%s cannot %s, which the operator commands need", operatorUser, q)
		}
	}
	for _, q := range operatorNever {
		if canI(q) {
			t.Errorf("%s can %s, which an operator must not", operatorUser, q)
		}
	}

	// The commands, with alice's own credentials.
	const node = "operated-node"
	if _, err := adminClient.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := userClient(t, c, operatorUser)
	rec, stop := taint.NewRecorder(alice, "fenced-cli")
	t.Cleanup(stop)
	op := &admin.Operator{Client: alice, Out: io.Discard, Recorder: rec, LeaseNamespace: namespace}
	for _, step := range []struct {
		what string
		run  func() error
	}{
		{"pause", func() error { _, err := op.Pause(ctx, "SAN maintenance"); return err }},
		{"status while paused", func() error {
			s, err := op.Status(ctx, admin.StatusOptions{})
			if err == nil && (s.Fencing == nil || !s.Fencing.Paused) {
				t.Errorf("status as %s does not show the pause: %+v", operatorUser, s.Fencing)
			}
			if err == nil && s.Fencing != nil {
				for _, u := range s.Fencing.Unknown {
					if strings.Contains(u, "forbidden") {
						t.Errorf("status as %s could not read: %s", operatorUser, u)
					}
				}
			}
			return err
		}},
		{"resume", func() error { _, err := op.Resume(ctx, "done"); return err }},
		{"exclude", func() error { _, err := op.Exclude(ctx, node, "firmware update"); return err }},
		{"include", func() error { _, err := op.Include(ctx, node, "done"); return err }},
		// What confirm writes, as confirm writes it (taint.Tainter).
		{"confirm's taint", func() error {
			_, err := taint.NewTainter(alice, "fenced-confirm/"+operatorUser, rec).Apply(ctx, node, core.Evidence{
				Method: vocab.EvidenceManual, By: operatorUser, At: time.Now(), Reason: "rack 4 unplugged"})
			return err
		}},
		{"confirm's Ready=False", func() error {
			// Ready=True first, as a kubelet leaves it: MarkNotReady writes
			// only over True (or no condition), and the node lifecycle
			// controller may have said Unknown since the Node's creation.
			if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				n, err := adminClient.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
				_, err = adminClient.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			_, changed, err := taint.NewTainter(alice, "fenced-confirm/"+operatorUser, rec).MarkNotReady(ctx, node, "confirmed off")
			if err == nil && !changed {
				t.Error("confirm's Ready=False: nothing written over Ready=True")
			}
			return err
		}},
		{"confirm's pod deletion", func() error {
			_, err := taint.NewTainter(alice, "fenced-confirm/"+operatorUser, rec).ForceDeletePods(ctx, node)
			return err
		}},
		{"confirm's history entry", func() error {
			return taint.AppendHistory(ctx, alice, namespace, taint.HistoryEntry{Node: node, Action: taint.HistoryFence,
				At: time.Now(), By: "fenced-confirm/" + operatorUser, Method: vocab.EvidenceManual, Reason: "rack 4 unplugged"})
		}},
		{"history", func() error {
			h, err := op.History(ctx, node)
			if err == nil && len(h.Entries) != 1 {
				t.Errorf("history of %s as %s: %d entries, want 1", node, operatorUser, len(h.Entries))
			}
			return err
		}},
	} {
		if err := step.run(); err != nil {
			t.Errorf("%s as %s: %v", step.what, operatorUser, err)
		}
	}
	if n, err := adminClient.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil || !taint.HasTaint(n) {
		t.Errorf("node %s after confirm's taint as %s: %v, tainted %v", node, operatorUser, err, err == nil && taint.HasTaint(n))
	}
	// And what it must not: the fencers' configuration stays theirs.
	if err := alice.CoreV1().ConfigMaps(namespace).Delete(ctx, "fenced-fencer-config", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting the fencers' configuration as %s: %v, want Forbidden", operatorUser, err)
	}
}

// userClient is a client of c authenticated as user (a client certificate
// of the cluster's CA), as a person's kubeconfig would be.
func userClient(t *testing.T, c *cluster.Cluster, user string) kubernetes.Interface {
	t.Helper()
	kubeconfig, err := c.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}
