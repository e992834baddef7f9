package stale

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/poll"
)

// testCure is the table of the Cure's outcomes against a real API server,
// as a fencer runs it: with the fencer's RBAC (Nodes and VolumeAttachments
// get, PolicyRules, DeletePolicyRules) and without permission to read
// Nodes. Each case makes node-a (Ready), pv-1 (claimed by claim-1,
// nothing uses it) and va-1 holding it on node-a — or on node-gone, which
// does not exist — reads va-1 as the caller's check would, and applies
// the Cure to that.
func testCure(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	base := append(PolicyRules(), DeletePolicyRules()...)
	base = append(base, rbacv1.PolicyRule{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"get"}})
	noNodes := userWith(ctx, t, c, "cure-no-nodes", base)
	fencer := userWith(ctx, t, c, "cure-fencer",
		append(slices.Clone(base), rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}))

	held := func(*corev1.Node) (bool, string) { return true, "fencing is paused (test)" }
	for _, tc := range []struct {
		name string
		// stuck makes va-1 stuck in deletion; node is where it is
		// attached (default node-a).
		stuck bool
		node  string
		// setup runs after va-1 was read as checked, before the cure.
		setup func(w *world)
		// target changes what the caller checked.
		target      func(*Target)
		cure        Cure
		noNodes     bool
		beforeWrite bool // va-1 changes between the re-check and the write
		want        Result
		// gone: va-1 no longer exists afterwards.
		gone bool
		// err checks Outcome.Err (nil: must be nil).
		err func(error) bool
	}{
		{name: "deleted", want: ResultDeleted, gone: true},
		{name: "released", stuck: true, want: ResultReleased, gone: true},
		{name: "UID changed", target: func(t *Target) { t.UID = "a-new-object" }, want: ResultReplaced},
		{name: "resourceVersion changed", setup: func(w *world) { w.touch("va-1") }, want: ResultChanged},
		{name: "resourceVersion changed while stuck: the attacher's retries, released", stuck: true,
			setup: func(w *world) { w.detachError("va-1", "still cannot detach (test)") }, want: ResultReleased, gone: true},
		{name: "deletion started since the check", target: func(t *Target) { t.Action = ActionDelete }, stuck: true, want: ResultChanged},
		{name: "release asked, not being deleted", target: func(t *Target) { t.Action = ActionRelease }, want: ResultChanged},
		{name: "not found", target: func(t *Target) { t.Name = "va-missing" }, want: ResultGone},
		{name: "conflict on the delete", beforeWrite: true, want: ResultConflict, err: apierrors.IsConflict},
		{name: "conflict on the release", stuck: true, beforeWrite: true, want: ResultConflict, err: apierrors.IsConflict},
		{name: "refused: volume in use", setup: func(w *world) { w.volumesInUse("node-a", "pv-1") }, want: ResultRefused},
		{name: "node gone: the fencer keeps it", node: "node-gone", want: ResultNodeGone},
		{name: "node gone: a person deletes it", node: "node-gone", cure: Cure{AllowDeletedNode: true}, want: ResultDeleted, gone: true},
		{name: "node gone, no permission to read Nodes", node: "node-gone", noNodes: true, cure: Cure{AllowDeletedNode: true},
			want: ResultUnchecked, err: apierrors.IsForbidden},
		{name: "no permission to read Nodes", noNodes: true, want: ResultUnchecked, err: apierrors.IsForbidden},
		{name: "held by the operator's switches", cure: Cure{Held: held}, want: ResultHeld},
		{name: "held while stuck", stuck: true, cure: Cure{Held: held}, want: ResultHeld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(ctx, t, c.Client())
			w.node("node-a", true)
			w.volume("pv-1", "claim-1")
			node := "node-a"
			if tc.node != "" {
				node = tc.node
			}
			if tc.stuck {
				w.stuck("va-1", node, "pv-1", "cannot detach (test)")
			} else {
				w.attachment("va-1", node, "pv-1")
			}
			checked, err := w.client.StorageV1().VolumeAttachments().Get(ctx, "va-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			target := Target{Name: checked.Name, UID: checked.UID, ResourceVersion: checked.ResourceVersion, Action: ActionFor(checked)}
			if tc.target != nil {
				tc.target(&target)
			}
			if tc.setup != nil {
				tc.setup(w)
			}
			cure := tc.cure
			cure.Client = fencer
			if tc.noNodes {
				cure.Client = noNodes
			}
			if tc.beforeWrite {
				cure.beforeWrite = func(_ context.Context, va string) {
					if err := w.touchErr(va); err != nil {
						t.Errorf("touching %s: %v", va, err)
					}
				}
			}

			o := cure.Apply(ctx, target)
			if o.Result != tc.want {
				t.Fatalf("result %s (%s, err %v), want %s", o.Result, o.Why, o.Err, tc.want)
			}
			if o.Wrote() == (o.Why != "") {
				t.Errorf("wrote %v, why %q: a cure that writes nothing says why, and only then", o.Wrote(), o.Why)
			}
			switch {
			case tc.err == nil && o.Err != nil:
				t.Errorf("err %v, want none", o.Err)
			case tc.err != nil && !tc.err(o.Err):
				t.Errorf("err %v, not the one expected", o.Err)
			}
			if tc.want == ResultReleased && !slices.Equal(o.Finalizers, []string{attacherFinalizer}) {
				t.Errorf("released finalizers %v, want %s", o.Finalizers, attacherFinalizer)
			}
			if tc.gone {
				w.waitGone("va-1")
				return
			}
			va, err := w.client.StorageV1().VolumeAttachments().Get(ctx, "va-1", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("va-1 kept: %v", err)
			}
			if tc.stuck && len(va.Finalizers) == 0 {
				t.Errorf("va-1 kept but its finalizers removed: %+v", va.ObjectMeta)
			}
		})
	}
}

// userWith makes user a clientset bound to a ClusterRole of rules, and
// waits until the authorizer knows the binding.
func userWith(ctx context.Context, t *testing.T, c *cluster.Cluster, user string, rules []rbacv1.PolicyRule) kubernetes.Interface {
	t.Helper()
	admin := c.Client()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := c.UserClient(user)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, deadline, user+"'s binding in force", func() bool {
		_, err := client.StorageV1().VolumeAttachments().Get(ctx, "no-such-attachment", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	return client
}
