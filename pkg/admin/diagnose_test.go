package admin

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/pkg/diagnose"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// The seeds' shapes: namespace "shop", Deployment "web" with the
// ReadWriteOnce claim "web-data", its volume attached to w-1, its new pod
// waiting on w-2.
const (
	dNS    = "shop"
	dPV    = "pvc-b39248ab-5a99-439b-ad6f-780aae30626c"
	dClaim = "web-data"
	dVA    = "csi-6ae3ead0d1c3a6e73e7d4c8e27f9098b927f3e4edc21bcf6bb7cf3fcdb4101de"
	dDrv   = "csi.fenced.test"
)

func dObjects(t0 time.Time) []runtime.Object {
	pvName := dPV
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: dPV},
		Spec: corev1.PersistentVolumeSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: dDrv, VolumeHandle: "vol-1"}}}}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: dNS, Name: dClaim},
		Spec:   corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: dPV},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: dVA, UID: "va-uid", CreationTimestamp: metav1.NewTime(t0.Add(-11 * time.Minute))},
		Spec:   storagev1.VolumeAttachmentSpec{Attacher: dDrv, NodeName: "w-1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true}}
	pod := dPod("web-7d9c-x2", "w-2", corev1.PodPending, "web-7d9c")
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: dNS, Name: "web-7d9c-x2.17f"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: dNS, Name: pod.Name},
		Reason:         string(vocab.EventFailedAttachVolume), Type: corev1.EventTypeWarning, Count: 3,
		FirstTimestamp: metav1.NewTime(t0.Add(-4 * time.Minute)), LastTimestamp: metav1.NewTime(t0.Add(-time.Minute)),
		Message: `Multi-Attach error for volume "` + dPV + `" Volume is already exclusively attached to one node and can't be attached to another`}
	yes := true
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: dNS, Name: "web"}}
	d.Spec.Template.Spec.Volumes = pod.Spec.Volumes
	rs := func(name string) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: dNS, Name: name,
			OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web", Controller: &yes, APIVersion: "apps/v1"}}}}
	}
	return []runtime.Object{newNode("w-1", corev1.ConditionTrue), newNode("w-2", corev1.ConditionTrue), pv, claim, va, pod, ev, d, rs("web-7d9c"), rs("web-5f6b")}
}

func dPod(name, node string, phase corev1.PodPhase, rs string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: dNS, Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0.Add(-5 * time.Minute)),
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: rs, Controller: &yes, APIVersion: "apps/v1"}}},
		Spec: corev1.PodSpec{NodeName: node, Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: dClaim}}}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

// dEnv is an env holding the seed objects, changed by mods (by name).
func dEnv(inv Inventory, mods func(objs []runtime.Object) []runtime.Object) *env {
	objs := dObjects(t0)
	if mods != nil {
		objs = mods(objs)
	}
	return newEnv(inv, objs...)
}

func nodeIn(objs []runtime.Object, name string) *corev1.Node {
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok && n.Name == name {
			return n
		}
	}
	return nil
}

func (e *env) vaExists(t *testing.T) bool {
	t.Helper()
	_, err := e.cs.StorageV1().VolumeAttachments().Get(context.Background(), dVA, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func TestDiagnoseOutputFormats(t *testing.T) {
	cases := []struct {
		format string
		check  func(t *testing.T, out string)
	}{
		{"", func(t *testing.T, out string) {
			for _, want := range []string{"POD", "HELD-BY", "shop/web-7d9c-x2", "stale-attachment", "delete-volumeattachment (--fix)", "4m",
				"node/w-1", "Ready=True for 60m", "status.volumesInUse does not list the volume", "FailedAttachVolume x3",
				"fix:      kubectl delete volumeattachment " + dVA} {
				if !strings.Contains(out, want) {
					t.Errorf("text lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "\x1b[") {
				t.Errorf("colour without a terminal:\n%q", out)
			}
		}},
		{"json", func(t *testing.T, out string) {
			var r diagnose.Report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if len(r.Findings) != 1 || r.Findings[0].Cause != diagnose.CauseStaleAttachment || r.Findings[0].Attachment != dVA ||
				r.Findings[0].HeldBy != "w-1" || !r.Findings[0].Fix.Automatic {
				t.Errorf("report = %+v", r)
			}
		}},
		{"yaml", func(t *testing.T, out string) {
			for _, want := range []string{"cause: stale-attachment", "heldBy: w-1", "action: delete-volumeattachment"} {
				if !strings.Contains(out, want) {
					t.Errorf("yaml lacks %q:\n%s", want, out)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run("format "+tc.format, func(t *testing.T) {
			e := dEnv(nil, nil)
			_, err := e.op.Diagnose(context.Background(), DiagnoseOptions{Output: printer.ForFormat(tc.format)})
			if !errors.Is(err, ErrStuck) {
				t.Fatalf("err = %v, want ErrStuck", err)
			}
			tc.check(t, e.out.String())
			if e.writes() != 0 {
				t.Errorf("diagnose without --fix wrote")
			}
		})
	}
}

func TestDiagnoseColourOnATerminal(t *testing.T) {
	e := dEnv(nil, nil)
	_, _ = e.op.Diagnose(context.Background(), DiagnoseOptions{Color: true})
	if !strings.Contains(e.out.String(), colorRed+string(diagnose.CauseStaleAttachment)+colorReset) {
		t.Errorf("no colour:\n%q", e.out)
	}
}

func TestDiagnoseNothingStuck(t *testing.T) {
	e := dEnv(nil, func(objs []runtime.Object) []runtime.Object { return objs[:5] }) // no pod
	if _, err := e.op.Diagnose(context.Background(), DiagnoseOptions{}); err != nil {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(e.out.String(), "No pod is stuck") {
		t.Errorf("output:\n%s", e.out)
	}
}

func TestDiagnoseShowsWhatFencedDoes(t *testing.T) {
	e := dEnv(fakeInventory{"w-1": {err: timeoutErr("w-1")}}, func(objs []runtime.Object) []runtime.Object {
		n := nodeIn(objs, "w-1")
		n.Status.Conditions[0].Status, n.Status.Conditions[0].Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
		mk := func(name, reason, msg string, at time.Duration) *corev1.Event {
			return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "w-1"}, Reason: reason, Message: msg, Type: corev1.EventTypeWarning,
				Source: corev1.EventSource{Component: "fenced"}, LastTimestamp: metav1.NewTime(t0.Add(-at))}
		}
		return append(objs,
			mk("w-1.a", string(vocab.EventCannotConfirmPowerState), "BMC unreachable", 4*time.Minute),
			mk("w-1.b", "CannotBeFencedAutomatically", "no fencing level answers", 9*time.Minute),
			&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w-1.c"}, InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "w-1"},
				Reason: "NodeNotReady", Source: corev1.EventSource{Component: "node-controller"}, LastTimestamp: metav1.NewTime(t0.Add(-time.Minute))})
	})
	_, err := e.op.Diagnose(context.Background(), DiagnoseOptions{})
	if !errors.Is(err, ErrStuck) {
		t.Fatal(err)
	}
	for _, want := range []string{"dead-node", "fenced:   fenced: CannotConfirmPowerState 4m ago: BMC unreachable",
		"no working fence device (CannotBeFencedAutomatically 9m: no fencing level answers)", "fenced confirm w-1 --reason"} {
		if !strings.Contains(e.out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, e.out)
		}
	}
}

func TestDiagnoseFixDecisions(t *testing.T) {
	deadW1 := func(objs []runtime.Object) []runtime.Object {
		n := nodeIn(objs, "w-1")
		n.Status.Conditions[0].Status = corev1.ConditionUnknown
		return objs
	}
	cases := []struct {
		name     string
		inv      fakeInventory
		mods     func([]runtime.Object) []runtime.Object
		opts     DiagnoseOptions
		wantErr  error // nil, ErrStuck or ErrRefused
		vaLeft   bool
		tainted  bool
		out      []string
		event    string // an Event that must be recorded
		noWrites bool
	}{
		{name: "stale, --yes: deleted and recorded", opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}},
			out:   []string{"delete volumeattachment " + dVA, "you: alice", "Deleted volumeattachment " + dVA},
			event: "Normal " + string(vocab.EventStaleVolumeAttachmentDeleted) + " alice deleted VolumeAttachment " + dVA},
		{name: "stale, terminal, answer y", opts: DiagnoseOptions{Fix: true, Consent: Consent{Terminal: true, In: strings.NewReader("y\n")}},
			out: []string{"Apply these 1 cure(s)? [y/N]"}, event: "Normal " + string(vocab.EventStaleVolumeAttachmentDeleted)},
		{name: "stale, terminal, answer n", opts: DiagnoseOptions{Fix: true, Consent: Consent{Terminal: true, In: strings.NewReader("n\n")}},
			wantErr: ErrRefused, vaLeft: true, out: []string{"Nothing changed."}, noWrites: true},
		{name: "no terminal, no --yes: nothing changes", opts: DiagnoseOptions{Fix: true, Consent: Consent{In: strings.NewReader("y\n")}},
			wantErr: ErrRefused, vaLeft: true, out: []string{"Nothing changed."}, noWrites: true},
		{name: "volume in volumesInUse: refused", opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, mods: func(objs []runtime.Object) []runtime.Object {
			nodeIn(objs, "w-1").Status.VolumesInUse = []corev1.UniqueVolumeName{"kubernetes.io/csi/" + dDrv + "^vol-1"}
			return objs
		}, wantErr: ErrStuck, vaLeft: true, out: []string{"will NOT delete-volumeattachment: node/w-1 lists", "Nothing fenced can cure safely"}, noWrites: true},
		{name: "rolling update: the patch, never applied", opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, mods: func(objs []runtime.Object) []runtime.Object {
			return append(objs, dPod("web-5f6b-old", "w-1", corev1.PodRunning, "web-5f6b"))
		}, wantErr: ErrStuck, vaLeft: true, out: []string{"fenced never changes a workload", diagnose.RecreatePatch}, noWrites: true},
		{name: "deleted node: deleted", opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, mods: func(objs []runtime.Object) []runtime.Object {
			return objs[1:]
		}, out: []string{"(node w-1)", "Deleted volumeattachment"}, event: "Normal " + string(vocab.EventStaleVolumeAttachmentDeleted)},
		{name: "dead node whose BMC reads on: refused", inv: fakeInventory{"w-1": {state: vocab.PowerOn, guid: nodeUUID}},
			opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, mods: deadW1, wantErr: ErrRefused, vaLeft: true,
			out: []string{"fenced confirm w-1", "NOT cured", "power ON"}, noWrites: true},
		{name: "dead node whose BMC reads off: confirmed", inv: fakeInventory{"w-1": {state: vocab.PowerOff, guid: nodeUUID}},
			opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, mods: deadW1, vaLeft: true, tainted: true,
			event: "Warning " + string(vocab.EventManualFenceConfirmed) + " alice confirmed node w-1 is powered off (fenced confirm): " + ConfirmReasonPrefix + "dead-node"},
		{name: "dead node, no terminal: nothing", inv: fakeInventory{"w-1": {state: vocab.PowerOff, guid: nodeUUID}},
			opts: DiagnoseOptions{Fix: true}, mods: deadW1, wantErr: ErrRefused, vaLeft: true, noWrites: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var inv Inventory
			if tc.inv != nil {
				inv = tc.inv
			}
			e := dEnv(inv, tc.mods)
			_, err := e.op.Diagnose(context.Background(), tc.opts)
			if (tc.wantErr == nil) != (err == nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("err = %v, want %v\n%s", err, tc.wantErr, e.out)
			}
			if got := e.vaExists(t); got != tc.vaLeft {
				t.Errorf("volumeattachment left = %v, want %v", got, tc.vaLeft)
			}
			if n, err := e.cs.CoreV1().Nodes().Get(context.Background(), "w-1", metav1.GetOptions{}); err == nil && taint.HasTaint(n) != tc.tainted {
				t.Errorf("tainted = %v, want %v", taint.HasTaint(n), tc.tainted)
			}
			if tc.noWrites && e.writes() != 0 {
				t.Errorf("%d writes, want none", e.writes())
			}
			for _, want := range tc.out {
				if !strings.Contains(e.out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, e.out)
				}
			}
			if tc.event != "" && !hasEvent(e.events(), tc.event) {
				t.Errorf("no Event %q", tc.event)
			}
		})
	}
}

func TestParseTarget(t *testing.T) {
	cases := []struct{ in, pod, claim, node string }{
		{"", "", "", ""}, {"web-0", "web-0", "", ""}, {"pod/web-0", "web-0", "", ""},
		{"pvc/data", "", "data", ""}, {"persistentvolumeclaim/data", "", "data", ""}, {"node/w-1", "", "", "w-1"},
	}
	for _, tc := range cases {
		pod, claim, node, err := ParseTarget(tc.in)
		if err != nil || pod != tc.pod || claim != tc.claim || node != tc.node {
			t.Errorf("ParseTarget(%q) = %q %q %q %v", tc.in, pod, claim, node, err)
		}
	}
	for _, bad := range []string{"svc/x", "pvc/", "node/a/b"} {
		if _, _, _, err := ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q) accepted", bad)
		}
	}
}

// TestDiagnoseGracefulShutdownFromAgentLeases: --all lists a node whose
// agent's own Lease says "none" as a node without graceful shutdown, and
// nothing for "kubelet-delay-lock", "unknown", no word, a Lease held by
// another node, or a Lease outside fenced's namespace.
func TestDiagnoseGracefulShutdownFromAgentLeases(t *testing.T) {
	lease := func(ns, node, holder string, g vocab.GracefulShutdown) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: publish.LeaseName(node),
			Annotations: map[string]string{}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
		if g != "" {
			l.Annotations[publish.AnnotationGracefulShutdown] = string(g)
		}
		return l
	}
	nodes := []string{"n-none", "n-lock", "n-unknown", "n-silent", "n-forged", "n-elsewhere", "n-nolease"}
	objs := []runtime.Object{
		lease("fenced-system", "n-none", "n-none", vocab.GracefulNone),
		lease("fenced-system", "n-lock", "n-lock", vocab.GracefulKubeletDelayLock),
		lease("fenced-system", "n-unknown", "n-unknown", vocab.GracefulUnknown),
		lease("fenced-system", "n-silent", "n-silent", ""),
		lease("fenced-system", "n-forged", "n-lock", vocab.GracefulNone),
		lease("other", "n-elsewhere", "n-elsewhere", vocab.GracefulNone),
	}
	for _, n := range nodes {
		objs = append(objs, newNode(n, corev1.ConditionTrue))
	}
	for _, tc := range []struct {
		name, ns string
		want     []string
	}{
		{"fenced's namespace", "fenced-system", []string{"node/n-none"}},
		{"no namespace configured", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, objs...)
			e.op.LeaseNamespace = tc.ns
			r, err := e.op.Diagnose(context.Background(), DiagnoseOptions{Scope: diagnose.Options{Risks: true}, Output: printer.ForFormat("json")})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, rk := range r.Risks {
				if rk.Kind == diagnose.RiskNoGracefulShutdown {
					got = append(got, rk.Object)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("no-graceful-shutdown risks %v, want %v; output:\n%s", got, tc.want, e.out)
			}
		})
	}

	// Leases that cannot be listed: logged, and diagnose goes on.
	e := newEnv(nil, objs...)
	e.op.LeaseNamespace = "fenced-system"
	e.cs.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "", errors.New("RBAC"))
	})
	r, err := e.op.Diagnose(context.Background(), DiagnoseOptions{Scope: diagnose.Options{Risks: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Risks) != 0 || !strings.Contains(e.log.String(), "could not read the agents' Leases") {
		t.Errorf("risks %v, log %s", r.Risks, e.log)
	}
}
