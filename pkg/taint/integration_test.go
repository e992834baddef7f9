package taint

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

// TestIntegration runs the package against a real control plane
// (internal/testbed/cluster): etcd, kube-apiserver with RBAC, and the controller manager,
// whose node lifecycle controller writes the same Nodes concurrently, as it
// would in production.
func TestIntegration(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{})

	t.Run("apply and remove", func(t *testing.T) { integrationRoundTrip(ctx, t, c) })
	t.Run("the returning taint waits for the controller-manager", func(t *testing.T) { integrationReturning(ctx, t, c) })
	t.Run("foreign taint", func(t *testing.T) { integrationForeign(ctx, t, c) })
	t.Run("concurrent label writer", func(t *testing.T) { integrationRace(ctx, t, c) })
	t.Run("mark not ready", func(t *testing.T) { integrationMarkNotReady(ctx, t, c) })
	t.Run("force delete pods", func(t *testing.T) { integrationForceDelete(ctx, t, c) })
	t.Run("rbac", func(t *testing.T) { integrationRBAC(ctx, t, c) })
}

// createNode creates a Node as a kubelet would have left it before its
// machine lost power: Ready=True, boot ID and system UUID known.
func createNode(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res,
			NodeInfo:    corev1.NodeSystemInfo{BootID: testBoot, SystemUUID: testUUID},
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now,
			}},
		},
	}
	n, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	return n
}

func getLive(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// nodeEvents lists the Events about a Node with the given reason.
func nodeEvents(ctx context.Context, t *testing.T, client kubernetes.Interface, node, reason string) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node, "reason": reason}.AsSelector().String()
	list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func integrationRoundTrip(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	client := c.Client()
	created := createNode(ctx, t, client, "roundtrip")
	rec, stop := NewRecorder(client, "fenced-test")
	defer stop()
	tn := NewTainter(client, "fencer-a", rec)

	applied, err := tn.Apply(ctx, "roundtrip", bmcEvidence())
	if err != nil || !applied {
		t.Fatalf("Apply = %v, %v", applied, err)
	}
	n := getLive(ctx, t, client, "roundtrip")
	tt := ourTaint(n)
	if tt == nil || tt.Value != TaintValue || tt.Effect != corev1.TaintEffectNoExecute || tt.TimeAdded == nil {
		t.Fatalf("taints = %+v", n.Spec.Taints)
	}
	ev, ok, err := EvidenceOf(n)
	if err != nil || !ok || ev.Method != vocab.EvidenceBMCPowerOff || ev.By != "fencer-a" || ev.BootID != testBoot || ev.BMC == nil || !ev.BMC.At.Equal(t0) {
		t.Fatalf("evidence = %+v, %v, %v", ev, ok, err)
	}
	if n.Annotations[AnnotationAppliedBy] != "fencer-a" {
		t.Errorf("annotations = %v", n.Annotations)
	}
	if applied, err := tn.Apply(ctx, "roundtrip", bmcEvidence()); err != nil || applied {
		t.Errorf("second Apply = %v, %v; want false, nil", applied, err)
	}

	res, err := tn.Remove(ctx, "roundtrip", "Ready again with a new boot ID")
	if err != nil || !res.OutOfService {
		t.Fatalf("Remove = %+v, %v", res, err)
	}
	n = getLive(ctx, t, client, "roundtrip")
	if HasTaint(n) || AppliedByFenced(n) || n.Annotations[AnnotationEvidence] != "" || !HasReturningTaint(n) || !n.Spec.Unschedulable {
		t.Errorf("after Remove: taints %+v annotations %v unschedulable %v", n.Spec.Taints, n.Annotations, n.Spec.Unschedulable)
	}
	n = liftWhenObserved(ctx, t, tn, "roundtrip")
	if HasReturningTaint(n) || n.Spec.Unschedulable || n.Annotations[AnnotationReturning] != "" {
		t.Errorf("after Lift: taints %+v annotations %v unschedulable %v", n.Spec.Taints, n.Annotations, n.Spec.Unschedulable)
	}

	// stop waits until the recorder has written its Events.
	stop()
	for reason, want := range map[string]string{
		string(vocab.EventOutOfServiceTaintApplied): string(vocab.EvidenceBMCPowerOff),
		string(vocab.EventOutOfServiceTaintRemoved): "new boot ID",
		string(vocab.EventReturningTaintLifted):     "uncordoned",
	} {
		evs := nodeEvents(ctx, t, client, "roundtrip", reason)
		if len(evs) != 1 {
			t.Errorf("%d %s Events in the API, want 1", len(evs), reason)
			continue
		}
		e := evs[0]
		if e.Type != corev1.EventTypeNormal || e.InvolvedObject.UID != created.UID || e.Source.Component != "fenced-test" || !strings.Contains(e.Message, want) {
			t.Errorf("%s Event = type %s object %+v source %+v message %q", reason, e.Type, e.InvolvedObject, e.Source, e.Message)
		}
	}
}

// integrationReturning is the way back against the real node lifecycle
// controller: with the controller-manager stopped (SIGSTOP), the swap
// lands but nothing answers its cordon, so the returning taint cannot be
// lifted for as long as it stays stopped; thawed, the controller answers
// and the lift goes through.
func integrationReturning(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	client := c.Client()
	createNode(ctx, t, client, "returning")
	tn := NewTainter(client, "fencer-a", nil)
	if applied, err := tn.Apply(ctx, "returning", bmcEvidence()); err != nil || !applied {
		t.Fatalf("Apply = %v, %v", applied, err)
	}
	if err := c.FreezeControllerManager(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.ThawControllerManager() })
	res, err := tn.Remove(ctx, "returning", "back")
	if err != nil || !res.OutOfService {
		t.Fatalf("Remove = %+v, %v", res, err)
	}
	if n := getLive(ctx, t, client, "returning"); HasTaint(n) || !HasReturningTaint(n) || CordonOf(n) != (core.Cordon{Unschedulable: true}) {
		t.Fatalf("after Remove: taints %+v, cordon %+v", n.Spec.Taints, CordonOf(n))
	}
	// As long as we look, nothing answers: 3 s is dozens of the node
	// lifecycle controller's answers when it runs (see below).
	frozen := time.Now()
	for time.Since(frozen) < 3*time.Second {
		if written, err := tn.Lift(ctx, "returning", "observed"); !errors.Is(err, ErrNotObserved) || written != nil {
			t.Fatalf("Lift with the controller-manager stopped = %v, %v; want ErrNotObserved", written != nil, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c.ThawControllerManager(); err != nil {
		t.Fatal(err)
	}
	thawed := time.Now()
	n := liftWhenObserved(ctx, t, tn, "returning")
	if HasReturningTaint(n) || n.Spec.Unschedulable {
		t.Fatalf("after Lift: taints %+v, unschedulable %v", n.Spec.Taints, n.Spec.Unschedulable)
	}
	t.Logf("the controller-manager answered %s after its thaw", time.Since(thawed).Round(time.Millisecond))
}

// removeWhenSettled calls Remove until the node lifecycle controller has
// settled the cordon (an earlier Lift uncordoned the node) and it swaps.
func removeWhenSettled(ctx context.Context, t *testing.T, tn *Tainter, node string) {
	t.Helper()
	poll.Until(t, time.Minute, "Remove finds the cordon of "+node+" settled", func() bool {
		res, err := tn.Remove(ctx, node, "round done")
		if err != nil && !errors.Is(err, ErrCordonUnsettled) {
			t.Fatalf("Remove: %v", err)
		}
		return res.OutOfService
	})
}

// liftWhenObserved calls Lift until the node lifecycle controller has
// answered the swap's cordon change and the returning taint comes off.
func liftWhenObserved(ctx context.Context, t *testing.T, tn *Tainter, node string) *corev1.Node {
	t.Helper()
	var written *corev1.Node
	poll.Until(t, time.Minute, "the node lifecycle controller answers the cordon of "+node, func() bool {
		var err error
		written, err = tn.Lift(ctx, node, "observed")
		if err != nil && !errors.Is(err, ErrNotObserved) {
			t.Fatalf("Lift: %v", err)
		}
		return written != nil
	})
	return written
}

func integrationForeign(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	client := c.Client()
	createNode(ctx, t, client, "foreign")
	// An operator's taint, applied by hand.
	patch := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":%q,"effect":"NoExecute"}]}}`, TaintKey, TaintValue)
	if _, err := client.CoreV1().Nodes().Patch(ctx, "foreign", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	before := getLive(ctx, t, client, "foreign")
	tn := NewTainter(client, "fencer-a", nil)
	if applied, err := tn.Apply(ctx, "foreign", bmcEvidence()); err != nil || applied {
		t.Errorf("Apply = %v, %v; want false, nil", applied, err)
	}
	if res, err := tn.Remove(ctx, "foreign", "recovered"); res.Node != nil || !errors.Is(err, ErrNotOurs) {
		t.Errorf("Remove = %+v, %v; want nothing, ErrNotOurs", res, err)
	}
	after := getLive(ctx, t, client, "foreign")
	if !HasTaint(after) || AppliedByFenced(after) {
		t.Errorf("operator's taint touched: %+v %v", after.Spec.Taints, after.Annotations)
	}
	// The node lifecycle controller may write other taints meanwhile; the
	// operator's must be exactly as it was.
	if b, a := ourTaint(before), ourTaint(after); a == nil || !equality.Semantic.DeepEqual(*a, *b) {
		t.Errorf("operator's taint changed: %+v → %+v", b, a)
	}
}

// integrationRace runs Apply and Remove while another client keeps adding
// labels to the same Node. Both writers must win: every label is there, and
// so are the taint and its annotations. The transport counts 409 answers, to
// show the conflict path really ran.
func integrationRace(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	createNode(ctx, t, c.Client(), "race")
	cfg := c.RESTConfig()
	var conflicts atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusConflict {
				conflicts.Add(1)
			}
			return resp, err
		})
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tn := NewTainter(client, "fencer-a", nil)

	stopLabels := make(chan struct{})
	var wg sync.WaitGroup
	var labels []string
	var labelErr error
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopLabels:
				return
			default:
			}
			key := fmt.Sprintf("race.fenced.io/l%d", i)
			// A merge patch without a resourceVersion never conflicts
			// itself, but moves the Node on under the Tainter.
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"x"}}}`, key)
			if _, err := c.Client().CoreV1().Nodes().Patch(ctx, "race", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				labelErr = err
				return
			}
			labels = append(labels, key)
			// 50 writes a second: many times the kubelet's and the node
			// lifecycle controller's pace, so that the Tainter meets
			// conflicts, yet not faster than a read-modify-write round
			// trip on a loaded machine (at 200 a second, with make test
			// beside it, every retry of a Remove lost the race).
			time.Sleep(20 * time.Millisecond)
		}
	})

	rounds := 0
	for ; rounds < 200 && conflicts.Load() < 3; rounds++ {
		if applied, err := tn.Apply(ctx, "race", bmcEvidence()); err != nil || !applied {
			t.Fatalf("round %d: Apply = %v, %v", rounds, applied, err)
		}
		removeWhenSettled(ctx, t, tn, "race")
		liftWhenObserved(ctx, t, tn, "race")
	}
	// A last Apply, still racing the labels.
	if applied, err := tn.Apply(ctx, "race", bmcEvidence()); err != nil || !applied {
		t.Fatalf("final Apply = %v, %v", applied, err)
	}
	close(stopLabels)
	wg.Wait()
	if labelErr != nil {
		t.Fatalf("label writer: %v", labelErr)
	}

	n := getLive(ctx, t, c.Client(), "race")
	var missing []string
	for _, l := range labels {
		if _, ok := n.Labels[l]; !ok {
			missing = append(missing, l)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d concurrent labels lost: %v", len(missing), len(labels), missing)
	}
	taints := 0
	for _, tt := range n.Spec.Taints {
		if tt.Key == TaintKey {
			taints++
		}
	}
	if taints != 1 || !AppliedByFenced(n) || n.Annotations[AnnotationEvidence] == "" {
		t.Errorf("after the race: %d out-of-service taints, annotations %v", taints, n.Annotations)
	}
	t.Logf("%d Apply/Remove/Lift rounds against %d concurrent label writes; %d conflicts retried", rounds, len(labels), conflicts.Load())
	if conflicts.Load() == 0 {
		t.Error("no conflict happened: the race did not exercise the retry path")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func integrationMarkNotReady(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	client := c.Client()
	createNode(ctx, t, client, "notready")
	tn := NewTainter(client, "fencer-a", nil)

	n, changed, err := tn.MarkNotReady(ctx, "notready", "BMC 198.18.0.11:623 reads power off")
	if err != nil || !changed {
		t.Fatalf("MarkNotReady = %v, %v", changed, err)
	}
	if c := ReadyCondition(n); c.Status != corev1.ConditionFalse || c.Reason != ReasonPoweredOff || !strings.Contains(c.Message, "power off") {
		t.Errorf("the Node written: Ready = %+v", c)
	}
	live := getLive(ctx, t, client, "notready")
	cond := *ReadyCondition(live)
	// The node lifecycle controller may have turned False into Unknown
	// already; it must not have been our write that failed.
	if cond.Status == corev1.ConditionTrue {
		t.Fatalf("Ready = %+v", cond)
	}
	if _, changed, err := tn.MarkNotReady(ctx, "notready", "again"); err != nil || changed {
		t.Errorf("second MarkNotReady = %v, %v; want a no-op", changed, err)
	}

	// Unknown, what the lifecycle controller writes for a silent kubelet,
	// is left alone: a write over it would read as a sign of life to it.
	rv := setReady(ctx, t, client, "notready", corev1.ConditionUnknown, "NodeStatusUnknown")
	n, changed, err = tn.MarkNotReady(ctx, "notready", "off")
	if err != nil || changed {
		t.Fatalf("MarkNotReady from Unknown = %v, %v; want no write", changed, err)
	}
	if c := ReadyCondition(n); c.Status == corev1.ConditionFalse || !newerOrSameRV(n.ResourceVersion, rv) {
		t.Errorf("the Node returned after no write: Ready %+v at resource version %s (Unknown set at %s)", c, n.ResourceVersion, rv)
	}

	// The kubelet's own True (a node back, or never off) is written over
	// again: that is the one case for a second write.
	setReady(ctx, t, client, "notready", corev1.ConditionTrue, "KubeletReady")
	if _, changed, err := tn.MarkNotReady(ctx, "notready", "off"); err != nil || !changed {
		t.Fatalf("MarkNotReady after the kubelet's Ready=True = %v, %v", changed, err)
	}
}

// setReady sets the Node's Ready condition as the kubelet or the node
// lifecycle controller would (retrying on conflict: the controller writes
// the same Node) and returns the resource version written.
func setReady(ctx context.Context, t *testing.T, client kubernetes.Interface, node string, status corev1.ConditionStatus, reason string) string {
	t.Helper()
	var rv string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getLive(ctx, t, client, node)
		ReadyCondition(n).Status = status
		ReadyCondition(n).Reason = reason
		w, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err == nil {
			rv = w.ResourceVersion
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

// newerOrSameRV compares resource versions (etcd revisions).
func newerOrSameRV(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x >= y
}

// boundPod is a pod already bound to node, tolerating every taint so that the
// taint-eviction controller leaves it to the test.
func boundPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Containers:  []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
}

func createPods(ctx context.Context, t *testing.T, client kubernetes.Interface, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
}

func integrationForceDelete(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	client := c.Client()
	for _, ns := range []string{"fd-a", "fd-b"} {
		if _, err := c.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	createNode(ctx, t, client, "fd-off")
	createNode(ctx, t, client, "fd-alive")
	createPods(ctx, t, client, boundPod("fd-a", "db-0", "fd-off"), boundPod("fd-b", "web-0", "fd-off"), boundPod("fd-a", "db-1", "fd-alive"))
	tn := NewTainter(client, "fencer-a", nil)

	if _, err := tn.ForceDeletePods(ctx, "fd-off"); !errors.Is(err, ErrNotFenced) {
		t.Fatalf("ForceDeletePods before the taint: %v, want ErrNotFenced", err)
	}
	if _, err := tn.Apply(ctx, "fd-off", bmcEvidence()); err != nil {
		t.Fatal(err)
	}
	n, err := tn.ForceDeletePods(ctx, "fd-off")
	if err != nil || n != 2 {
		t.Fatalf("ForceDeletePods = %d, %v; want 2, nil", n, err)
	}
	// Grace period 0: gone at once, no kubelet needed to confirm.
	all, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range all.Items {
		if strings.HasPrefix(p.Namespace, "fd-") {
			left = append(left, p.Namespace+"/"+p.Name+"@"+p.Spec.NodeName)
		}
	}
	if strings.Join(left, ",") != "fd-a/db-1@fd-alive" {
		t.Errorf("pods left: %v; want only the one on the live node", left)
	}
}

// integrationRBAC binds PolicyRules to a user and runs every operation as
// that user; then, for each verb, binds the rules minus that verb to another
// user and checks that the operation needing it is refused, so the table in
// the package documentation is exactly what is needed.
func integrationRBAC(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	admin := c.Client()
	if _, err := c.CreateNamespace(ctx, "rbac"); err != nil {
		t.Fatal(err)
	}
	createNode(ctx, t, admin, "rbac-full")
	createNode(ctx, t, admin, "rbac-clean")
	createNode(ctx, t, admin, "rbac-fenced")
	createPods(ctx, t, admin, boundPod("rbac", "full-0", "rbac-full"), boundPod("rbac", "fenced-0", "rbac-fenced"))
	if _, err := NewTainter(admin, "admin", nil).Apply(ctx, "rbac-fenced", bmcEvidence()); err != nil {
		t.Fatal(err)
	}

	type variant struct {
		user  string
		rules []rbacv1.PolicyRule
		// check runs the operation that needs the missing verb.
		check func(t *testing.T, client kubernetes.Interface, user string)
	}
	forbidden := func(what string, err error) error {
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("%s: %v, want Forbidden", what, err)
		}
		return nil
	}
	opChecks := map[string]func(t *testing.T, client kubernetes.Interface, user string){
		"nodes/get": func(t *testing.T, client kubernetes.Interface, user string) {
			_, err := NewTainter(client, user, nil).Apply(ctx, "rbac-clean", bmcEvidence())
			if err := forbidden("Apply", err); err != nil {
				t.Error(err)
			}
		},
		"nodes/update": func(t *testing.T, client kubernetes.Interface, user string) {
			_, err := NewTainter(client, user, nil).Apply(ctx, "rbac-clean", bmcEvidence())
			if err := forbidden("Apply", err); err != nil {
				t.Error(err)
			}
		},
		"nodes/status/update": func(t *testing.T, client kubernetes.Interface, user string) {
			// Ready=True, so that the write is tried (the node lifecycle
			// controller may have said Unknown since the Node's creation).
			setReady(ctx, t, admin, "rbac-clean", corev1.ConditionTrue, "KubeletReady")
			_, _, err := NewTainter(client, user, nil).MarkNotReady(ctx, "rbac-clean", "off")
			if err := forbidden("MarkNotReady", err); err != nil {
				t.Error(err)
			}
		},
		"pods/list": func(t *testing.T, client kubernetes.Interface, user string) {
			_, err := NewTainter(client, user, nil).ForceDeletePods(ctx, "rbac-fenced")
			if err := forbidden("ForceDeletePods", err); err != nil {
				t.Error(err)
			}
		},
		"pods/delete": func(t *testing.T, client kubernetes.Interface, user string) {
			n, err := NewTainter(client, user, nil).ForceDeletePods(ctx, "rbac-fenced")
			if err := forbidden("ForceDeletePods", err); err != nil || n != 0 {
				t.Errorf("%v (deleted %d)", err, n)
			}
		},
		"events/create": func(t *testing.T, client kubernetes.Interface, user string) {
			rec, stop := NewRecorder(client, "fenced-test")
			rec.Event(nodeRef(getLive(ctx, t, admin, "rbac-clean")), corev1.EventTypeNormal, "RBACProbeCreate", "probe "+user)
			stop()
			if evs := nodeEvents(ctx, t, admin, "rbac-clean", "RBACProbeCreate"); len(evs) != 0 {
				t.Errorf("Event written without create: %+v", evs)
			}
		},
		"events/patch": func(t *testing.T, client kubernetes.Interface, user string) {
			rec, stop := NewRecorder(client, "fenced-test")
			ref := nodeRef(getLive(ctx, t, admin, "rbac-clean"))
			rec.Event(ref, corev1.EventTypeNormal, "RBACProbePatch", "probe "+user)
			rec.Event(ref, corev1.EventTypeNormal, "RBACProbePatch", "probe "+user)
			stop()
			evs := nodeEvents(ctx, t, admin, "rbac-clean", "RBACProbePatch")
			if len(evs) != 1 || evs[0].Count != 1 {
				t.Errorf("Events %+v; want one with count 1 (the repeat needs patch)", evs)
			}
		},
	}

	var variants []variant
	for i, rule := range PolicyRules() {
		for _, verb := range rule.Verbs {
			name := rule.Resources[0] + "/" + verb
			check, ok := opChecks[name]
			if !ok {
				t.Fatalf("no check for %s: every verb in PolicyRules must be shown to be needed", name)
			}
			rules := PolicyRules()
			rules[i].Verbs = slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == verb })
			if len(rules[i].Verbs) == 0 {
				rules = slices.Delete(rules, i, i+1)
			}
			user := "fenced-without-" + strings.ReplaceAll(name, "/", "-")
			variants = append(variants, variant{user: user, rules: rules, check: check})
		}
	}
	if len(variants) != len(opChecks) {
		t.Fatalf("%d verbs in PolicyRules, %d checks: keep them in step", len(variants), len(opChecks))
	}
	// The full user last: once its binding works, the RBAC authorizer's
	// caches (one watch per kind, in order) hold all the earlier ones.
	variants = append(variants, variant{user: "fenced-fencer", rules: PolicyRules()})
	for _, v := range variants {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: v.user}, Rules: v.rules}
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range variants {
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: v.user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: v.user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: v.user}},
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clients := map[string]kubernetes.Interface{}
	for _, v := range variants {
		path, err := c.UserKubeconfig(v.user)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		if clients[v.user], err = kubernetes.NewForConfig(cfg); err != nil {
			t.Fatal(err)
		}
	}
	full := clients["fenced-fencer"]
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := full.CoreV1().Nodes().Get(ctx, "rbac-full", metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("the binding for fenced-fencer did not take effect: %v", err)
	}

	t.Run("exactly these verbs suffice", func(t *testing.T) {
		rec, stop := NewRecorder(full, "fenced-test")
		defer stop()
		tn := NewTainter(full, "fenced-fencer", rec)
		if applied, err := tn.Apply(ctx, "rbac-full", bmcEvidence()); err != nil || !applied {
			t.Fatalf("Apply = %v, %v", applied, err)
		}
		setReady(ctx, t, admin, "rbac-full", corev1.ConditionTrue, "KubeletReady")
		if _, changed, err := tn.MarkNotReady(ctx, "rbac-full", "off"); err != nil || !changed {
			t.Fatalf("MarkNotReady = %v, %v", changed, err)
		}
		if n, err := tn.ForceDeletePods(ctx, "rbac-full"); err != nil || n != 1 {
			t.Fatalf("ForceDeletePods = %d, %v", n, err)
		}
		if res, err := tn.Remove(ctx, "rbac-full", "back"); err != nil || !res.OutOfService {
			t.Fatalf("Remove = %+v, %v", res, err)
		}
		liftWhenObserved(ctx, t, tn, "rbac-full")
		// A repeated Event makes client-go patch the first one's count.
		ref := nodeRef(getLive(ctx, t, admin, "rbac-full"))
		rec.Event(ref, corev1.EventTypeNormal, "RBACProbeRepeat", "same text")
		rec.Event(ref, corev1.EventTypeNormal, "RBACProbeRepeat", "same text")
		stop()
		for _, reason := range []string{string(vocab.EventOutOfServiceTaintApplied), string(vocab.EventOutOfServiceTaintRemoved), string(vocab.EventReturningTaintLifted)} {
			if evs := nodeEvents(ctx, t, admin, "rbac-full", reason); len(evs) != 1 {
				t.Errorf("%d %s Events, want 1", len(evs), reason)
			}
		}
		if evs := nodeEvents(ctx, t, admin, "rbac-full", "RBACProbeRepeat"); len(evs) != 1 || evs[0].Count != 2 {
			t.Errorf("repeated Event: %+v; want one with count 2", evs)
		}
	})
	for _, v := range variants[:len(variants)-1] {
		t.Run(strings.TrimPrefix(v.user, "fenced-")+" is refused", func(t *testing.T) {
			v.check(t, clients[v.user], v.user)
		})
	}
	// The refused operations must not have changed anything.
	if n := getLive(ctx, t, admin, "rbac-clean"); HasTaint(n) || ReadyCondition(n).Reason == ReasonPoweredOff {
		t.Errorf("a refused operation changed rbac-clean: %+v %+v", n.Spec.Taints, n.Status.Conditions)
	}
	if _, err := admin.CoreV1().Pods("rbac").Get(ctx, "fenced-0", metav1.GetOptions{}); err != nil {
		t.Errorf("pod of rbac-fenced: %v; want it still there", err)
	}
}
