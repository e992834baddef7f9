package taint

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

var (
	nodesGVR = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	t0       = time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
)

const (
	testBoot = "7d9c2a4e-0b1f-4c55-9a3e-2f0c1d2e3f40"
	testUUID = "4c4c4544-0042-3510-8052-b4c04f4d4e31"
)

// testNode is a node as a powered-off machine leaves it: the kubelet's last
// status (Ready=True), a label, and the not-ready taint the API server adds.
func testNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			UID:         types.UID("uid-" + name),
			Labels:      map[string]string{"kubernetes.io/hostname": name},
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			NodeInfo: corev1.NodeSystemInfo{BootID: testBoot, SystemUUID: testUUID},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
					LastHeartbeatTime: metav1.NewTime(t0.Add(-time.Minute)), LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))},
			},
		},
	}
}

func bmcEvidence() core.Evidence {
	return core.Evidence{
		Method: vocab.EvidenceBMCPowerOff,
		At:     t0,
		BMC:    &core.Reading{Power: vocab.PowerOff, At: t0, Endpoint: "198.18.0.11:623", SystemGUID: testUUID},
	}
}

// newTainter returns a Tainter on a fake clientset holding objs, with a short
// backoff and a fixed clock, and its recorder.
func newTainter(identity string, objs ...runtime.Object) (*Tainter, *fake.Clientset, *record.FakeRecorder) {
	cs := fake.NewClientset(objs...)
	rec := record.NewFakeRecorder(20)
	tn := NewTainter(cs, identity, rec)
	tn.backoff = wait.Backoff{Steps: 4, Duration: time.Millisecond, Factor: 1}
	tn.now = func() time.Time { return t0.Add(5 * time.Second) }
	return tn, cs, rec
}

func getNode(t *testing.T, cs *fake.Clientset, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// count counts the recorded actions with verb on resource (subresource "" or
// the one named, e.g. "nodes/status").
func count(cs *fake.Clientset, verb, resource string) int {
	res, sub, _ := strings.Cut(resource, "/")
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == res && a.GetSubresource() == sub {
			n++
		}
	}
	return n
}

func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func ourTaint(n *corev1.Node) *corev1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == TaintKey {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

func TestApplyIdempotent(t *testing.T) {
	ctx := context.Background()
	tn, cs, rec := newTainter("fencer-a", testNode("n1"))

	applied, err := tn.Apply(ctx, "n1", bmcEvidence())
	if err != nil || !applied {
		t.Fatalf("first Apply = %v, %v; want true, nil", applied, err)
	}
	applied, err = tn.Apply(ctx, "n1", bmcEvidence())
	if err != nil || applied {
		t.Fatalf("second Apply = %v, %v; want false, nil", applied, err)
	}
	if got := count(cs, "update", "nodes"); got != 1 {
		t.Errorf("%d node updates, want exactly 1", got)
	}

	n := getNode(t, cs, "n1")
	tt := ourTaint(n)
	if tt == nil || tt.Value != TaintValue || tt.Effect != corev1.TaintEffectNoExecute || tt.TimeAdded == nil {
		t.Fatalf("taint = %+v, want %s=%s:NoExecute with TimeAdded", tt, TaintKey, TaintValue)
	}
	if !tt.TimeAdded.Time.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("TimeAdded = %v", tt.TimeAdded)
	}
	if len(n.Spec.Taints) != 2 {
		t.Errorf("taints = %+v, want the existing not-ready taint kept", n.Spec.Taints)
	}
	if !HasTaint(n) || !AppliedByFenced(n) || n.Annotations[AnnotationAppliedBy] != "fencer-a" {
		t.Errorf("annotations = %v", n.Annotations)
	}
	if n.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"] != "true" || n.Labels["kubernetes.io/hostname"] != "n1" {
		t.Errorf("existing metadata lost: %v %v", n.Labels, n.Annotations)
	}
	ev, ok, err := EvidenceOf(n)
	if err != nil || !ok {
		t.Fatalf("EvidenceOf = %v, %v", ok, err)
	}
	// By and BootID are filled in from the Tainter and the Node.
	want := bmcEvidence()
	want.By, want.BootID = "fencer-a", testBoot
	if !evidenceEqual(ev, want) {
		t.Errorf("evidence = %+v, want %+v", ev, want)
	}

	evs := events(rec)
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal "+string(vocab.EventOutOfServiceTaintApplied)+" ") ||
		!strings.Contains(evs[0], string(vocab.EvidenceBMCPowerOff)) || !strings.Contains(evs[0], "198.18.0.11:623") {
		t.Errorf("events = %q, want one Normal %s naming the method and BMC", evs, vocab.EventOutOfServiceTaintApplied)
	}
}

func TestApplyAnotherFencersTaint(t *testing.T) {
	ctx := context.Background()
	tnA, cs, _ := newTainter("fencer-a", testNode("n1"))
	if _, err := tnA.Apply(ctx, "n1", bmcEvidence()); err != nil {
		t.Fatal(err)
	}
	tnB := NewTainter(cs, "fencer-b", nil)
	applied, err := tnB.Apply(ctx, "n1", bmcEvidence())
	if err != nil || applied {
		t.Fatalf("Apply by a second fencer = %v, %v; want false, nil", applied, err)
	}
	if got := getNode(t, cs, "n1").Annotations[AnnotationAppliedBy]; got != "fencer-a" {
		t.Errorf("applied-by = %q, want the first fencer's", got)
	}
}

func TestApplyLeavesForeignTaint(t *testing.T) {
	ctx := context.Background()
	n := testNode("n1")
	foreign := corev1.Taint{Key: TaintKey, Value: "operator", Effect: corev1.TaintEffectNoExecute}
	n.Spec.Taints = append(n.Spec.Taints, foreign)
	tn, cs, rec := newTainter("fencer-a", n)

	applied, err := tn.Apply(ctx, "n1", bmcEvidence())
	if err != nil || applied {
		t.Fatalf("Apply = %v, %v; want false, nil", applied, err)
	}
	if got := count(cs, "update", "nodes"); got != 0 {
		t.Errorf("%d updates of a node with a foreign taint", got)
	}
	got := getNode(t, cs, "n1")
	if AppliedByFenced(got) || *ourTaint(got) != foreign {
		t.Errorf("foreign taint touched: %+v %v", got.Spec.Taints, got.Annotations)
	}
	if evs := events(rec); len(evs) != 0 {
		t.Errorf("events = %q", evs)
	}
}

func TestApplyRejectsBadEvidence(t *testing.T) {
	withBMC := func(mod func(*core.Evidence)) core.Evidence {
		ev := bmcEvidence()
		mod(&ev)
		return ev
	}
	bad := map[string]core.Evidence{
		"empty":                       {},
		"unknown method":              {Method: "timeout", At: t0},
		"gossip says dead":            {Method: "gossip-dead", At: t0, BootID: testBoot},
		"zero time":                   withBMC(func(e *core.Evidence) { e.At = time.Time{} }),
		"bmc without reading":         withBMC(func(e *core.Evidence) { e.BMC = nil }),
		"bmc reads on":                withBMC(func(e *core.Evidence) { e.BMC.Power = "On" }),
		"bmc reading unknown":         withBMC(func(e *core.Evidence) { e.BMC.Power = "unknown" }),
		"bmc reading without time":    withBMC(func(e *core.Evidence) { e.BMC.At = time.Time{} }),
		"clean shutdown without boot": {Method: vocab.EvidenceCleanShutdown, At: t0},
		"manual but bmc reads on": {Method: vocab.EvidenceManual, At: t0, By: "alice", Reason: "rack 4 unplugged",
			BMC: &core.Reading{Power: "on", At: t0, Endpoint: "bmc"}},
		"evidence for an older boot":      withBMC(func(e *core.Evidence) { e.BootID = "0f0f0f0f-old-boot" }),
		"bmc of another machine":          withBMC(func(e *core.Evidence) { e.BMC.SystemGUID = "00000000-0000-0000-0000-000000000001" }),
		"clean shutdown of an older boot": {Method: vocab.EvidenceCleanShutdown, At: t0, BootID: "0f0f0f0f-old-boot"},
	}
	for name, ev := range bad {
		t.Run(name, func(t *testing.T) {
			tn, cs, rec := newTainter("fencer-a", testNode("n1"))
			applied, err := tn.Apply(context.Background(), "n1", ev)
			if applied || !errors.Is(err, core.ErrInvalidEvidence) {
				t.Fatalf("Apply = %v, %v; want false and core.ErrInvalidEvidence", applied, err)
			}
			if HasTaint(getNode(t, cs, "n1")) || count(cs, "update", "nodes") != 0 || len(events(rec)) != 0 {
				t.Error("bad evidence led to a write or an Event")
			}
		})
	}

	good := map[string]core.Evidence{
		"redfish spelling Off":    withBMC(func(e *core.Evidence) { e.BMC.Power = "Off" }),
		"guid spelled unlike k8s": withBMC(func(e *core.Evidence) { e.BMC.SystemGUID = "{4C4C4544004235108052B4C04F4D4E31}" }),
		"bmc without guid":        withBMC(func(e *core.Evidence) { e.BMC.SystemGUID = "" }),
		"matching boot id":        withBMC(func(e *core.Evidence) { e.BootID = testBoot }),
		"clean shutdown":          {Method: vocab.EvidenceCleanShutdown, At: t0, BootID: testBoot, By: "fencer-a"},
		"manual":                  {Method: vocab.EvidenceManual, At: t0, By: "alice", Reason: "PDU port 7 switched off"},
		"manual, bmc unreachable": {Method: vocab.EvidenceManual, At: t0, By: "alice",
			BMC: &core.Reading{Power: "unknown", At: t0, Endpoint: "bmc"}},
	}
	for name, ev := range good {
		t.Run(name, func(t *testing.T) {
			tn, _, _ := newTainter("fencer-a", testNode("n1"))
			if applied, err := tn.Apply(context.Background(), "n1", ev); err != nil || !applied {
				t.Fatalf("Apply = %v, %v; want true, nil", applied, err)
			}
		})
	}
}

func TestApplyMissingNode(t *testing.T) {
	tn, _, _ := newTainter("fencer-a")
	if _, err := tn.Apply(context.Background(), "ghost", bmcEvidence()); !apierrors.IsNotFound(err) {
		t.Fatalf("Apply on a missing node: %v, want NotFound", err)
	}
}

func evidenceEqual(a, b core.Evidence) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb) && a.At.Equal(b.At)
}

func TestEvidenceJSONRoundTrip(t *testing.T) {
	full := core.Evidence{
		Method: vocab.EvidenceBMCPowerOff,
		By:     "fencer-a",
		At:     time.Date(2026, 3, 1, 3, 0, 0, 123456789, time.FixedZone("CET", 3600)),
		BootID: testBoot,
		Reason: "NotReady for 40s, gossip dead",
		BMC: &core.Reading{Power: vocab.PowerOff, At: t0, Endpoint: "198.18.0.11:623",
			SystemGUID: testUUID, PoweredOffByFenced: true},
	}
	raw, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"method":`, `"by":`, `"at":`, `"bootID":`, `"reason":`, `"bmc":`, `"power":`, `"endpoint":`, `"systemGUID":`, `"poweredOffByFenced":true`} {
		if !strings.Contains(string(raw), field) {
			t.Errorf("JSON %s lacks %s", raw, field)
		}
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationEvidence: string(raw)}}}
	got, ok, err := EvidenceOf(n)
	if err != nil || !ok {
		t.Fatalf("EvidenceOf = %v, %v", ok, err)
	}
	if !got.At.Equal(full.At) || !got.BMC.At.Equal(full.BMC.At) || !evidenceEqual(got, full) {
		t.Errorf("round trip: got %+v (%+v), want %+v (%+v)", got, *got.BMC, full, *full.BMC)
	}

	minimal, _ := json.Marshal(core.Evidence{Method: vocab.EvidenceManual, By: "alice", At: t0})
	if want := `{"method":"manual","by":"alice","at":"2026-03-01T03:00:00Z"}`; string(minimal) != want {
		t.Errorf("minimal evidence = %s, want %s (empty optional fields omitted)", minimal, want)
	}

	if _, ok, err := EvidenceOf(&corev1.Node{}); ok || err != nil {
		t.Errorf("no annotation: ok=%v err=%v", ok, err)
	}
	if _, ok, err := EvidenceOf(nil); ok || err != nil {
		t.Errorf("nil node: ok=%v err=%v", ok, err)
	}
	n.Annotations[AnnotationEvidence] = "{not json"
	if _, ok, err := EvidenceOf(n); !ok || err == nil {
		t.Errorf("bad JSON: ok=%v err=%v; want true and an error", ok, err)
	}
}

func TestMarkNotReady(t *testing.T) {
	withReady := func(s corev1.ConditionStatus) *corev1.Node {
		n := testNode("n1")
		n.Status.Conditions[1].Status = s
		return n
	}
	noReady := testNode("n1")
	noReady.Status.Conditions = noReady.Status.Conditions[:1]
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		changed bool
		// want is the Ready status after the call.
		want corev1.ConditionStatus
	}{
		{"True", withReady(corev1.ConditionTrue), true, corev1.ConditionFalse},
		// The node lifecycle controller's Unknown is not written over:
		// it takes any write of the condition for a sign of life.
		{"Unknown", withReady(corev1.ConditionUnknown), false, corev1.ConditionUnknown},
		{"False", withReady(corev1.ConditionFalse), false, corev1.ConditionFalse},
		{"missing", noReady, true, corev1.ConditionFalse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn, cs, _ := newTainter("fencer-a", tc.node)
			got, changed, err := tn.MarkNotReady(context.Background(), "n1", "BMC reads power off")
			if err != nil || changed != tc.changed {
				t.Fatalf("MarkNotReady = %v, %v; want %v, nil", changed, err, tc.changed)
			}
			if got == nil || ReadyCondition(got).Status != tc.want {
				t.Errorf("the Node returned: %+v; want it as the API has it now, Ready %s", got, tc.want)
			}
			wantWrites := 0
			if tc.changed {
				wantWrites = 1
			}
			if got := count(cs, "update", "nodes/status"); got != wantWrites {
				t.Errorf("%d status updates, want %d", got, wantWrites)
			}
			if got := count(cs, "update", "nodes"); got != 0 {
				t.Errorf("%d updates of the Node itself, want only the status subresource", got)
			}
			n := getNode(t, cs, "n1")
			c := *ReadyCondition(n)
			if c.Status != tc.want {
				t.Fatalf("Ready = %s, want %s", c.Status, tc.want)
			}
			if !tc.changed {
				return
			}
			if c.Reason != ReasonPoweredOff || c.Message != "BMC reads power off" || !c.LastTransitionTime.Time.Equal(t0.Add(5*time.Second)) {
				t.Errorf("condition = %+v", c)
			}
			if tc.name != "missing" && !c.LastHeartbeatTime.Time.Equal(t0.Add(-time.Minute)) {
				t.Errorf("LastHeartbeatTime changed to %v: fenced is not the kubelet", c.LastHeartbeatTime)
			}
			if n.Status.Conditions[0].Type != corev1.NodeMemoryPressure {
				t.Errorf("other conditions disturbed: %+v", n.Status.Conditions)
			}
		})
	}
}

func pod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

func TestForceDeletePods(t *testing.T) {
	ctx := context.Background()
	tainted := testNode("n1")
	tainted.Spec.Taints = append(tainted.Spec.Taints, corev1.Taint{Key: TaintKey, Value: TaintValue, Effect: corev1.TaintEffectNoExecute})
	tn, cs, _ := newTainter("fencer-a", tainted, testNode("n2"),
		pod("a", "db-0", "n1"), pod("b", "web-1", "n1"), pod("a", "db-1", "n2"), pod("a", "pending", ""))

	n, err := tn.ForceDeletePods(ctx, "n1")
	if err != nil || n != 2 {
		t.Fatalf("ForceDeletePods = %d, %v; want 2, nil", n, err)
	}
	actions := cs.Actions()
	left, _ := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	var names []string
	for _, p := range left.Items {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if strings.Join(names, ",") != "a/db-1,a/pending" {
		t.Errorf("pods left = %v, want only those not on n1", names)
	}
	for _, a := range actions {
		switch a := a.(type) {
		case k8stesting.ListAction:
			if a.GetResource().Resource == "pods" && a.GetListRestrictions().Fields.String() != "spec.nodeName=n1" {
				t.Errorf("list with field selector %q", a.GetListRestrictions().Fields)
			}
		case k8stesting.DeleteAction:
			o := a.GetDeleteOptions()
			if o.GracePeriodSeconds == nil || *o.GracePeriodSeconds != 0 || o.Preconditions == nil || o.Preconditions.UID == nil {
				t.Errorf("delete %s with options %+v; want grace 0 and a UID precondition", a.GetName(), o)
			}
		}
	}

	// Nothing left: zero, no error.
	if n, err := tn.ForceDeletePods(ctx, "n1"); err != nil || n != 0 {
		t.Errorf("second ForceDeletePods = %d, %v", n, err)
	}
}

func TestForceDeletePodsRefusesUntaintedNode(t *testing.T) {
	tn, cs, _ := newTainter("fencer-a", testNode("n2"), pod("a", "db-1", "n2"))
	n, err := tn.ForceDeletePods(context.Background(), "n2")
	if n != 0 || !errors.Is(err, ErrNotFenced) {
		t.Fatalf("ForceDeletePods = %d, %v; want 0, ErrNotFenced", n, err)
	}
	if count(cs, "delete", "pods") != 0 {
		t.Error("deleted a pod of an untainted node")
	}
}

func TestForceDeletePodsGoneOrReplaced(t *testing.T) {
	tainted := testNode("n1")
	tainted.Spec.Taints = append(tainted.Spec.Taints, corev1.Taint{Key: TaintKey, Effect: corev1.TaintEffectNoExecute})
	tn, cs, _ := newTainter("fencer-a", tainted, pod("a", "gone", "n1"), pod("a", "replaced", "n1"), pod("a", "ok", "n1"), pod("a", "broken", "n1"))
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		gr := schema.GroupResource{Resource: "pods"}
		switch name := a.(k8stesting.DeleteAction).GetName(); name {
		case "gone":
			return true, nil, apierrors.NewNotFound(gr, name)
		case "replaced":
			return true, nil, apierrors.NewConflict(gr, name, errors.New("Precondition failed: UID in precondition"))
		case "broken":
			return true, nil, apierrors.NewInternalError(errors.New("etcd on fire"))
		}
		return false, nil, nil
	})
	n, err := tn.ForceDeletePods(context.Background(), "n1")
	if n != 1 || err == nil || !strings.Contains(err.Error(), "a/broken") || strings.Contains(err.Error(), "gone") || strings.Contains(err.Error(), "replaced") {
		t.Fatalf("ForceDeletePods = %d, %v; want 1 and an error naming only a/broken", n, err)
	}
}

// conflictOnce makes the first update of verb/resource fail with a Conflict,
// after running concurrently (the change another writer made in between).
func conflictOnce(t *testing.T, cs *fake.Clientset, resource, subresource string, concurrently func(n *corev1.Node)) *int {
	calls := new(int)
	cs.PrependReactor("update", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != subresource {
			return false, nil, nil
		}
		*calls++
		if *calls > 1 {
			return false, nil, nil
		}
		name := a.(k8stesting.UpdateAction).GetObject().(*corev1.Node).Name
		// Straight to the tracker: the clientset is locked while reactors run.
		obj, err := cs.Tracker().Get(nodesGVR, "", name)
		if err != nil {
			t.Error(err)
		}
		n := obj.(*corev1.Node).DeepCopy()
		concurrently(n)
		if err := cs.Tracker().Update(nodesGVR, n, ""); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, name, errors.New("the object has been modified"))
	})
	return calls
}

func TestApplyConflictRetries(t *testing.T) {
	ctx := context.Background()
	t.Run("concurrent label survives", func(t *testing.T) {
		tn, cs, rec := newTainter("fencer-a", testNode("n1"))
		calls := conflictOnce(t, cs, "nodes", "", func(n *corev1.Node) { n.Labels["team"] = "storage" })
		applied, err := tn.Apply(ctx, "n1", bmcEvidence())
		if err != nil || !applied {
			t.Fatalf("Apply = %v, %v", applied, err)
		}
		if *calls != 2 || count(cs, "get", "nodes") != 2 {
			t.Errorf("%d updates, %d gets; want a re-read and one retry", *calls, count(cs, "get", "nodes"))
		}
		n := getNode(t, cs, "n1")
		if n.Labels["team"] != "storage" || !HasTaint(n) || !AppliedByFenced(n) {
			t.Errorf("after retry: labels %v taints %+v annotations %v", n.Labels, n.Spec.Taints, n.Annotations)
		}
		if len(events(rec)) != 1 {
			t.Error("want exactly one Event")
		}
	})
	t.Run("operator tainted meanwhile", func(t *testing.T) {
		tn, cs, rec := newTainter("fencer-a", testNode("n1"))
		conflictOnce(t, cs, "nodes", "", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintKey, Value: "by-hand", Effect: corev1.TaintEffectNoExecute})
		})
		applied, err := tn.Apply(ctx, "n1", bmcEvidence())
		if err != nil || applied {
			t.Fatalf("Apply = %v, %v; want false, nil", applied, err)
		}
		n := getNode(t, cs, "n1")
		if AppliedByFenced(n) || ourTaint(n).Value != "by-hand" || len(events(rec)) != 0 {
			t.Errorf("operator's taint claimed: %+v %v", n.Spec.Taints, n.Annotations)
		}
	})
	t.Run("node rebooted meanwhile", func(t *testing.T) {
		tn, cs, _ := newTainter("fencer-a", testNode("n1"))
		conflictOnce(t, cs, "nodes", "", func(n *corev1.Node) { n.Status.NodeInfo.BootID = "new-boot" })
		ev := bmcEvidence()
		ev.BootID = testBoot
		if applied, err := tn.Apply(ctx, "n1", ev); applied || !errors.Is(err, core.ErrInvalidEvidence) {
			t.Fatalf("Apply = %v, %v; want the re-check to reject stale evidence", applied, err)
		}
		if HasTaint(getNode(t, cs, "n1")) {
			t.Error("tainted a node that came back")
		}
	})
}

func TestRemoveConflictRetries(t *testing.T) {
	ctx := context.Background()
	tn, cs, _ := newTainter("fencer-a", testNode("n1"))
	if _, err := tn.Apply(ctx, "n1", bmcEvidence()); err != nil {
		t.Fatal(err)
	}
	conflictOnce(t, cs, "nodes", "", func(n *corev1.Node) { n.Labels["team"] = "storage" })
	res, err := tn.Remove(ctx, "n1", "recovered")
	if err != nil || !res.OutOfService {
		t.Fatalf("Remove = %+v, %v", res, err)
	}
	n := getNode(t, cs, "n1")
	if n.Labels["team"] != "storage" || HasTaint(n) || AppliedByFenced(n) || !HasReturningTaint(n) {
		t.Errorf("after retry: labels %v taints %+v annotations %v", n.Labels, n.Spec.Taints, n.Annotations)
	}
}

func TestMarkNotReadyConflictRetries(t *testing.T) {
	// The kubelet came back and wrote its own status in between; if it said
	// False already, the retry is a no-op.
	tn, cs, _ := newTainter("fencer-a", testNode("n1"))
	calls := conflictOnce(t, cs, "nodes", "status", func(n *corev1.Node) {
		n.Status.Conditions[1].Status = corev1.ConditionFalse
		n.Status.Conditions[1].Reason = "KubeletNotReady"
	})
	_, changed, err := tn.MarkNotReady(context.Background(), "n1", "off")
	if err != nil || changed || *calls != 1 {
		t.Fatalf("MarkNotReady = %v, %v after %d status updates; want false, nil, 1", changed, err, *calls)
	}
	if c := getNode(t, cs, "n1").Status.Conditions[1]; c.Reason != "KubeletNotReady" {
		t.Errorf("condition overwritten: %+v", c)
	}
}

func TestConflictRetriesRunOut(t *testing.T) {
	tn, cs, rec := newTainter("fencer-a", testNode("n1"))
	updates := 0
	cs.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("modified"))
	})
	applied, err := tn.Apply(context.Background(), "n1", bmcEvidence())
	if applied || !apierrors.IsConflict(err) {
		t.Fatalf("Apply = %v, %v; want false and a Conflict", applied, err)
	}
	if updates != tn.backoff.Steps {
		t.Errorf("%d attempts, want %d", updates, tn.backoff.Steps)
	}
	if len(events(rec)) != 0 {
		t.Error("Event without a taint")
	}
}

func TestCanceledContext(t *testing.T) {
	tn, _, _ := newTainter("fencer-a", testNode("n1"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tn.Apply(ctx, "n1", bmcEvidence()); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a canceled context: %v", err)
	}
}

func TestHelpersOnNil(t *testing.T) {
	if HasTaint(nil) || AppliedByFenced(nil) {
		t.Error("nil node has a taint")
	}
	if NewTainter(fake.NewClientset(), "", nil).Identity() != "fenced" {
		t.Error("empty identity not defaulted")
	}
}

func TestNewRecorderFlushesOnStop(t *testing.T) {
	cs := fake.NewClientset()
	rec, stop := NewRecorder(cs, "fenced-test")
	ref := nodeRef(testNode("n1"))
	for i := range 3 {
		rec.Eventf(ref, corev1.EventTypeNormal, string(vocab.EventOutOfServiceTaintApplied), "event %d", i)
	}
	stop()
	stop() // idempotent
	evs, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 3 {
		t.Fatalf("%d Events written by the time stop returned, want 3: %+v", len(evs.Items), evs.Items)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != "n1" || e.Source.Component != "fenced-test" {
			t.Errorf("Event %+v", e)
		}
	}
}
