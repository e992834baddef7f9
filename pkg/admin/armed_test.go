package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// fencerLease is node's key Lease with the state a fencer publishes on it
// (publish.PublishFencerState), renewed ago before t0.
func fencerLease(node string, ago time.Duration, s publish.FencerState) *coordinationv1.Lease {
	at := metav1.NewMicroTime(t0.Add(-ago))
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: publish.LeaseName(node), Namespace: testNS,
			Annotations: map[string]string{publish.AnnotationBootID: "boot-" + node}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), RenewTime: &at},
	}
	for k, v := range map[string]string{
		publish.AnnotationFencerReady:          map[bool]string{true: "true", false: "false"}[s.Ready],
		publish.AnnotationFencerMode:           string(s.Mode),
		publish.AnnotationFencerDryRun:         map[bool]string{true: "true", false: "false"}[s.DryRun],
		publish.AnnotationFencerInventoryNodes: map[bool]string{true: "2", false: "0"}[s.InventoryNodes == 2],
		publish.AnnotationFencerConfigHash:     s.ConfigHash,
	} {
		l.Annotations[k] = v
	}
	return l
}

// observerLease is an observer's key Lease: no fencer state.
func observerLease(node string) *coordinationv1.Lease {
	at := metav1.NewMicroTime(t0)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: publish.LeaseName(node), Namespace: testNS,
			Annotations: map[string]string{publish.AnnotationBootID: "boot-" + node}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), RenewTime: &at},
	}
}

// TestFencingView: status without --agent tells from the API whether
// fencing is armed — the fencers as they publish themselves on their
// Leases (ready and renewed, dry-run, inventory), the pause — and says
// what it could not read.
func TestFencingView(t *testing.T) {
	excluded := newNode("n1", corev1.ConditionTrue)
	excluded.Labels = map[string]string{taint.ExcludeLabel: "true"}
	live := publish.FencerState{Ready: true, Mode: vocab.ModeConfirmOnly, InventoryNodes: 2, ConfigHash: "0a1b2c3d4e5f"}
	with := func(edit func(*publish.FencerState)) publish.FencerState { s := live; edit(&s); return s }
	stale := publish.FencerStateStaleAfter + time.Second
	const forbidden = "Leases forbidden" // the case whose Leases may not be listed
	for _, tc := range []struct {
		name  string
		objs  []runtime.Object
		armed string // "yes", "no" or "" (unknown)
		ready int
		want  []string
	}{
		{"a fresh fencer", []runtime.Object{fencerLease("cp-1", 10*time.Second, live), observerLease("w-1")},
			"yes", 1, []string{"fencing: ARMED", "fencers ready:     1 of 1", "cp-1: ready (renewed 10s ago), mode confirm-only, dry-run no, inventory 2 node(s), config 0a1b2c3d4e5f", "excluded nodes:    1"}},
		{"a stale fencer", []runtime.Object{fencerLease("cp-1", stale, live)},
			"no", 0, []string{"fencing: NOT ARMED", "fencers ready:     0 of 1", "cp-1: STALE (renewed 1m31s ago)"}},
		{"a stale fencer beside a fresh one", []runtime.Object{fencerLease("cp-1", stale, live), fencerLease("cp-2", time.Second, live)},
			"yes", 1, []string{"fencing: ARMED", "fencers ready:     1 of 2", "cp-1: STALE", "cp-2: ready"}},
		{"dry-run", []runtime.Object{fencerLease("cp-1", time.Second, with(func(s *publish.FencerState) { s.DryRun = true }))},
			"no", 1, []string{"fencing: NOT ARMED", "dry-run YES"}},
		{"paused", []runtime.Object{fencerLease("cp-1", time.Second, live), pauseCM(map[string]string{"paused": "true", "reason": "SAN"})},
			"no", 1, []string{"fencing: NOT ARMED", "paused:            YES: SAN"}},
		{"joining", []runtime.Object{fencerLease("cp-1", time.Second, with(func(s *publish.FencerState) { s.Ready = false }))},
			"no", 0, []string{"fencing: NOT ARMED", "cp-1: not ready"}},
		{"no inventory", []runtime.Object{fencerLease("cp-1", time.Second, with(func(s *publish.FencerState) { s.InventoryNodes = 0 }))},
			"no", 1, []string{"fencing: NOT ARMED", "inventory 0 node(s)"}},
		{"two configurations", []runtime.Object{fencerLease("cp-1", time.Second, live),
			fencerLease("cp-2", time.Second, with(func(s *publish.FencerState) { s.ConfigHash = "ffffffffffff" }))},
			"yes", 2, []string{"the ready fencers run 2 different files (0a1b2c3d4e5f, ffffffffffff)"}},
		{"no fencer", []runtime.Object{observerLease("w-1")}, "no", 0, []string{"fencing: NOT ARMED", "no fencer has published its state"}},
		{forbidden, []runtime.Object{fencerLease("cp-1", time.Second, live)}, "", 0, []string{"fencing: unknown", "fencers: leases.coordination.k8s.io is forbidden"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, append(tc.objs, excluded)...)
			e.op.LeaseNamespace = testNS
			if tc.name == forbidden {
				e.cs.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "", errors.New("RBAC"))
				})
			}
			s, err := e.op.Status(context.Background(), StatusOptions{})
			if err != nil {
				t.Fatal(err)
			}
			v := s.Fencing
			armed := ""
			if v.Armed != nil {
				armed = map[bool]string{true: "yes", false: "no"}[*v.Armed]
			}
			if armed != tc.armed || v.FencersReady != tc.ready {
				t.Errorf("armed = %q, ready %d; want %q, %d: %+v", armed, v.FencersReady, tc.armed, tc.ready, v)
			}
			var out strings.Builder
			if err := printer.Print(&out, "", s.Doc(t0)); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// TestFencingViewReadsNoPods: the armed view reads Leases and the pause,
// never pods or the fencers' configuration (which systemd fencers do not
// have in the API, and which the operators' role may not read).
func TestFencingViewReadsNoPods(t *testing.T) {
	e := newEnv(nil, fencerLease("cp-1", time.Second, publish.FencerState{Ready: true, Mode: vocab.ModePowerOff, InventoryNodes: 2}))
	e.op.LeaseNamespace = testNS
	if _, err := e.op.Status(context.Background(), StatusOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range e.cs.Actions() {
		r := a.GetResource().Resource
		if r == "pods" || (r == "configmaps" && (a.GetVerb() != "get" || a.(k8stesting.GetAction).GetName() != taint.PauseConfigMap)) {
			t.Errorf("status %s %s: the armed view reads Leases and the pause only", a.GetVerb(), r)
		}
	}
}
