package stale

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/diagnose"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// testGrace is the grace period in these tests: short, so they run in
// seconds; nothing asserts how long anything took.
const (
	testGrace = 2 * time.Second
	driver    = "csi.fenced.test"
	ns        = metav1.NamespaceDefault
	// deadline bounds every wait: generous for a loaded 2-core machine.
	deadline = 2 * time.Minute
)

// TestIntegration runs the Reporter with real informers against a real
// API server. No node lifecycle or attach/detach controller runs: the
// Nodes, volumes and attachments are exactly what each case makes them.
func TestIntegration(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true,
		Controllers: []string{"serviceaccount-controller", "serviceaccount-token-controller"}})
	client := c.Client()
	waitDefaultServiceAccount(ctx, t, client)

	t.Run("reported", func(t *testing.T) { testReported(ctx, t, client) })
	for _, tc := range []struct {
		name     string
		reason   diagnose.RefusalReason
		setup    func(w *world)
		deleting bool
	}{
		{"pod on the node uses it", diagnose.RefusePodUsesVolume, func(w *world) { w.pod("user", "node-a", "claim-1", corev1.PodRunning) }, false},
		{"volume in use", diagnose.RefuseVolumeInUse, func(w *world) { w.volumesInUse("node-a", "pv-1") }, false},
		{"node not ready", diagnose.RefuseNodeNotReady, func(w *world) { w.setReady("node-a", false) }, false},
		// Being deleted while the kubelet still has it mounted: the
		// attach/detach controller waits for the unmount; nothing is stuck.
		{"volume in use, being deleted", diagnose.RefuseVolumeInUse, func(w *world) { w.volumesInUse("node-a", "pv-1") }, true},
		{"pod on the node uses it, being deleted", diagnose.RefusePodUsesVolume, func(w *world) { w.pod("user", "node-a", "claim-1", corev1.PodRunning) }, true},
	} {
		t.Run("never reported: "+tc.name, func(t *testing.T) { testNeverReported(ctx, t, client, tc.reason, tc.setup, tc.deleting) })
	}
	t.Run("deleted", func(t *testing.T) { testDeleted(ctx, t, client) })
	t.Run("not deleted: held by a switch", func(t *testing.T) { testHeld(ctx, t, client) })
	t.Run("not deleted: changed before the delete", func(t *testing.T) { testPrecondition(ctx, t, client) })
	t.Run("not deleted: volumesInUse before the re-check", func(t *testing.T) { testRecheck(ctx, t, client) })
	t.Run("stuck detach: reported", func(t *testing.T) { testStuckReported(ctx, t, client) })
	t.Run("stuck detach: detaching for less than the grace", func(t *testing.T) { testDetaching(ctx, t, client) })
	t.Run("stuck detach: released", func(t *testing.T) { testReleased(ctx, t, client) })
	t.Run("stuck detach: not released: changed before the update", func(t *testing.T) { testReleaseConflict(ctx, t, client) })
	t.Run("cure", func(t *testing.T) { testCure(ctx, t, c) })
}

// testReported: a Ready node holds pv-1 (a pod on node-b waits for it)
// and pv-2 (nobody waits); nothing on the node uses either. After the
// grace both are counted, the waiting pod gets the Event for pv-1, the
// VolumeAttachment of pv-2 its own; with the switch off nothing is
// deleted.
func testReported(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	w := newWorld(ctx, t, client)
	w.node("node-a", true)
	w.volume("pv-1", "claim-1")
	w.volume("pv-2", "claim-2")
	w.attachment("va-1", "node-a", "pv-1")
	w.attachment("va-2", "node-a", "pv-2")
	w.pod("waiter", "node-b", "claim-1", corev1.PodPending)
	r := w.start(Config{})

	w.logs.wait(t, "va-1 reported", func(l logLine) bool { return l.is(DecisionReported, "va-1") })
	w.logs.wait(t, "va-2 reported", func(l logLine) bool { return l.is(DecisionReported, "va-2") })
	poll.Until(t, deadline, "the gauge at 2", func() bool { return testutil.ToFloat64(r.cfg.Metrics.Stale) == 2 })
	w.waitEvent("Pod", "waiter", string(vocab.EventStaleVolumeAttachment))
	w.waitEvent("VolumeAttachment", "va-2", string(vocab.EventStaleVolumeAttachment))
	if w.hasEvent("VolumeAttachment", "va-1", string(vocab.EventStaleVolumeAttachment)) {
		t.Errorf("va-1 has a pod waiting for it: the Event belongs on the pod only")
	}

	// Switch off: a fresh look at both finds them stale, and they stay.
	w.touch("va-1")
	w.logs.wait(t, "va-1 held again after its change", func(l logLine) bool {
		return l.is(DecisionHolding, "va-1") && l.attrs["why"] == "the VolumeAttachment changed"
	})
	w.logs.wait(t, "va-1 reported again", func(l logLine) bool { return l.is(DecisionReported, "va-1") && l.n > 0 })
	for _, va := range []string{"va-1", "va-2"} {
		if _, err := client.StorageV1().VolumeAttachments().Get(ctx, va, metav1.GetOptions{}); err != nil {
			t.Errorf("%s with the switch off: %v", va, err)
		}
	}
	if n := testutil.ToFloat64(r.cfg.Metrics.Deleted); n != 0 {
		t.Errorf("deleted %v with the switch off", n)
	}

	// A pod on the node starts using pv-1: no longer stale.
	w.pod("user", "node-a", "claim-1", corev1.PodRunning)
	w.logs.wait(t, "va-1 cleared", func(l logLine) bool {
		return l.is(DecisionCleared, "va-1") && strings.Contains(l.attrs["reason"], "uses volume pv-1")
	})
	poll.Until(t, deadline, "the gauge at 1", func() bool { return testutil.ToFloat64(r.cfg.Metrics.Stale) == 1 })
}

// testNeverReported: what setup adds keeps the attachment from being
// stale. The check after the grace has passed still refuses, for the
// reason given, and the attachment was never held.
//
// deleting: the attachment is being deleted, held by a finalizer, with a
// detach error; the switch is on, and it is never released either.
func testNeverReported(ctx context.Context, t *testing.T, client kubernetes.Interface, reason diagnose.RefusalReason, setup func(*world), deleting bool) {
	w := newWorld(ctx, t, client)
	w.node("node-a", true)
	w.volume("pv-1", "claim-1")
	w.pod("waiter", "node-b", "claim-1", corev1.PodPending)
	setup(w)
	if deleting {
		w.stuck("va-1", "node-a", "pv-1", "detach failed (test)")
	} else {
		w.attachment("va-1", "node-a", "pv-1")
	}
	checks := make(chan []diagnose.Refusal, 100)
	r := w.start(Config{Delete: true, checked: func(va string, rs []diagnose.Refusal) {
		if va == "va-1" {
			select {
			case checks <- rs:
			default:
			}
		}
	}})
	refuses := func(rs []diagnose.Refusal) bool {
		return slices.ContainsFunc(rs, func(r diagnose.Refusal) bool { return r.Reason == reason })
	}
	waitCheck(t, checks, refuses)
	// Once the grace has passed, look again.
	time.Sleep(2 * testGrace)
	for len(checks) > 0 {
		<-checks
	}
	w.touch("va-1")
	waitCheck(t, checks, refuses)
	if l, ok := w.logs.find(func(l logLine) bool { return l.attrs["va"] == "va-1" }); ok {
		t.Errorf("va-1 was held: %v", l)
	}
	if g := testutil.ToFloat64(r.cfg.Metrics.Stale); g != 0 {
		t.Errorf("gauge %v, want 0", g)
	}
	if w.hasEvent("Pod", "waiter", string(vocab.EventStaleVolumeAttachment)) {
		t.Error("the waiting pod got a StaleVolumeAttachment Event")
	}
	va, err := client.StorageV1().VolumeAttachments().Get(ctx, "va-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("va-1: %v", err)
	}
	if deleting && len(va.Finalizers) == 0 {
		t.Errorf("va-1 lost its finalizers: %+v", va.ObjectMeta)
	}
	if n := testutil.ToFloat64(r.cfg.Metrics.Deleted); n != 0 {
		t.Errorf("deleted %v", n)
	}
}

// testDeleted: with the switch on, a stale attachment is deleted after
// the re-check, counted, and the deletion recorded.
func testDeleted(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	w := newWorld(ctx, t, client)
	w.node("node-a", true)
	w.volume("pv-1", "claim-1")
	w.pod("waiter", "node-b", "claim-1", corev1.PodPending)
	w.attachment("va-1", "node-a", "pv-1")
	// A deleted Node's attachment is reported as stale, but a deleted Node
	// says nothing about the machine: never deleted automatically.
	w.volume("pv-2", "claim-2")
	w.attachment("va-gone", "node-gone", "pv-2")
	r := w.start(Config{Delete: true})
	w.logs.wait(t, "va-1 deleted", func(l logLine) bool { return l.is(DecisionDeleted, "va-1") })
	w.waitGone("va-1")
	w.logs.wait(t, "va-gone kept", func(l logLine) bool {
		return l.is(DecisionKept, "va-gone") && strings.Contains(l.attrs["reason"], "no longer exists")
	})
	poll.Until(t, deadline, "1 deletion counted", func() bool { return testutil.ToFloat64(r.cfg.Metrics.Deleted) == 1 })
	poll.Until(t, deadline, "the gauge at 1 (va-gone)", func() bool { return testutil.ToFloat64(r.cfg.Metrics.Stale) == 1 })
	if _, err := client.StorageV1().VolumeAttachments().Get(ctx, "va-gone", metav1.GetOptions{}); err != nil {
		t.Errorf("va-gone: %v", err)
	}
	w.waitEvent("VolumeAttachment", "va-1", string(vocab.EventStaleVolumeAttachmentDeleted))
	w.waitEvent("Pod", "waiter", string(vocab.EventStaleVolumeAttachmentDeleted))
}

// testHeld: with the switch on, the operator's switches (dry-run, pause,
// the node's exclusion label — the fencer's HoldsEffects) keep a stale
// attachment: reported, never deleted.
func testHeld(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	w := newWorld(ctx, t, client)
	w.node("node-a", true)
	w.volume("pv-1", "claim-1")
	w.attachment("va-1", "node-a", "pv-1")
	r := w.start(Config{Delete: true, Held: func(*corev1.Node) (bool, string) { return true, "fencing is paused (test)" }})
	w.logs.wait(t, "va-1 kept", func(l logLine) bool {
		return l.is(DecisionKept, "va-1") && strings.Contains(l.attrs["reason"], "paused")
	})
	if _, err := client.StorageV1().VolumeAttachments().Get(ctx, "va-1", metav1.GetOptions{}); err != nil {
		t.Errorf("va-1: %v", err)
	}
	if n := testutil.ToFloat64(r.cfg.Metrics.Deleted); n != 0 {
		t.Errorf("deleted %v", n)
	}
}

// testPrecondition: the attachment changes between the re-check and the
// delete; the precondition makes the API server refuse, and it stays.
func testPrecondition(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	w := newWorld(ctx, t, client)
	w.node("node-a", true)
	w.volume("pv-1", "claim-1")
	w.attachment("va-1", "node-a", "pv-1")
	hook, release := w.touchFirst(t)
	r := w.start(Config{Delete: true, beforeDelete: hook})
	w.logs.wait(t, "va-1 kept", func(l logLine) bool {
		return l.is(DecisionKept, "va-1") && strings.Contains(l.attrs["reason"], "precondition")
	})
	va, err := client.StorageV1().VolumeAttachments().Get(ctx, "va-1", metav1.GetOptions{})
	if err != nil || va.Annotations["touched"] == "" {
		t.Errorf("va-1 after the refused delete: %v, %v", va, err)
	}
	if n := testutil.ToFloat64(r.cfg.Metrics.Deleted); n != 0 {
		t.Errorf("deleted %v", n)
	}
	// The change starts the grace again.
	w.logs.wait(t, "va-1 held again", func(l logLine) bool { return l.is(DecisionHolding, "va-1") && l.n > 0 })
	close(release)
}

// testRecheck: the kubelet lists the volume in volumesInUse after the
// informers' check and before the re-check: the re-check refuses.
func testRecheck(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	w := newWorld(ctx, t, client)
	w.node("node-a", true)
	w.volume("pv-1", "claim-1")
	w.attachment("va-1", "node-a", "pv-1")
	var once sync.Once
	deleteCalled := make(chan struct{}, 1)
	r := w.start(Config{Delete: true,
		beforeRecheck: func(context.Context, string) {
			once.Do(func() {
				if err := w.updateNodeStatusErr("node-a", inUse("pv-1")); err != nil {
					t.Errorf("volumesInUse: %v", err)
				}
			})
		},
		beforeDelete: func(context.Context, string) {
			select {
			case deleteCalled <- struct{}{}:
			default:
			}
		}})
	w.logs.wait(t, "va-1 kept", func(l logLine) bool {
		return l.is(DecisionKept, "va-1") && strings.Contains(l.attrs["reason"], "volumesInUse")
	})
	// Let the grace pass again, and look: still refused, never deleted.
	time.Sleep(2 * testGrace)
	w.touch("va-1")
	time.Sleep(testGrace)
	select {
	case <-deleteCalled:
		t.Error("the delete was attempted")
	default:
	}
	if _, err := client.StorageV1().VolumeAttachments().Get(ctx, "va-1", metav1.GetOptions{}); err != nil {
		t.Errorf("va-1: %v", err)
	}
	if n := testutil.ToFloat64(r.cfg.Metrics.Deleted); n != 0 {
		t.Errorf("deleted %v", n)
	}
}

// testStuckReported (seed 000 on a real attach/detach controller): the
// pod moved to node-b, the attach/detach controller deleted va-1, the CSI
// driver cannot detach, the external-attacher's finalizer keeps it. The
// node is Ready and nothing there uses the volume: after the grace it is
// reported like any stale attachment, with a reason that says the detach
// is stuck and quotes the detach error. With the switch off it stays.
// va-gone, stuck the same way on a deleted Node, is reported too.
func testStuckReported(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	w := newWorld(ctx, t, client)
	w.node("node-a", true)
	w.volume("pv-1", "claim-1")
	w.pod("waiter", "node-b", "claim-1", corev1.PodPending)
	w.stuck("va-1", "node-a", "pv-1", "rpc error: code = Internal desc = cannot detach (test)")
	w.volume("pv-2", "claim-2")
	w.stuck("va-gone", "node-gone", "pv-2", "")
	r := w.start(Config{})

	l := w.logs.wait(t, "va-1 reported", func(l logLine) bool { return l.is(DecisionReported, "va-1") })
	for _, want := range []string{"node/node-a is Ready", "detach is stuck", "finalizer " + attacherFinalizer,
		`detachError: "rpc error: code = Internal desc = cannot detach (test)"`} {
		if !strings.Contains(l.attrs["reason"], want) {
			t.Errorf("reason %q, want it to contain %q", l.attrs["reason"], want)
		}
	}
	if l.attrs["waiting"] != ns+"/waiter" {
		t.Errorf("waiting %q, want %s/waiter", l.attrs["waiting"], ns)
	}
	w.logs.wait(t, "va-gone reported", func(l logLine) bool {
		return l.is(DecisionReported, "va-gone") && strings.Contains(l.attrs["reason"], "no longer exists") &&
			strings.Contains(l.attrs["reason"], "detach is stuck")
	})
	poll.Until(t, deadline, "the gauge at 2", func() bool { return testutil.ToFloat64(r.cfg.Metrics.Stale) == 2 })
	w.waitEvent("Pod", "waiter", string(vocab.EventStaleVolumeAttachment))
	w.waitEvent("VolumeAttachment", "va-gone", string(vocab.EventStaleVolumeAttachment))
	if ev := w.events("Pod", "waiter", string(vocab.EventStaleVolumeAttachment)); len(ev) > 0 && !strings.Contains(ev[0].Message, "finalizers") {
		t.Errorf("Event %q does not say how to release it", ev[0].Message)
	}

	// The external-attacher retries and rewrites its error: not a change
	// that starts the grace again.
	w.detachError("va-1", "rpc error: code = Internal desc = still cannot detach (test)")
	w.touch("va-1")
	time.Sleep(testGrace)
	if l, ok := w.logs.find(func(l logLine) bool { return l.is(DecisionHolding, "va-1") && l.n > 0 }); ok {
		t.Errorf("va-1 held again after a status change while being deleted: %v", l)
	}
	for _, name := range []string{"va-1", "va-gone"} {
		va, err := client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(va.Finalizers) == 0 {
			t.Errorf("%s with the switch off: %v, %v", name, va, err)
		}
	}
	if n := testutil.ToFloat64(r.cfg.Metrics.Deleted); n != 0 {
		t.Errorf("released %v with the switch off", n)
	}

	// The driver detaches at last: the attacher removes its finalizer.
	w.unfinalize("va-1")
	w.logs.wait(t, "va-1 cleared", func(l logLine) bool {
		return l.is(DecisionCleared, "va-1") && l.attrs["reason"] == "it is gone"
	})
	poll.Until(t, deadline, "the gauge at 1", func() bool { return testutil.ToFloat64(r.cfg.Metrics.Stale) == 1 })
}

// testDetaching: an attachment deleted for less than the grace is
// detaching normally. The fencer's clock runs an hour behind the API
// server's, so va-1 stays deleted "less than the grace" for the whole
// case while the rule holds on it for longer than the grace: held,
// never reported, never released.
func testDetaching(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	w := newWorld(ctx, t, client)
	w.node("node-a", true)
	w.volume("pv-1", "claim-1")
	w.pod("waiter", "node-b", "claim-1", corev1.PodPending)
	w.stuck("va-1", "node-a", "pv-1", "")
	r := w.start(Config{Delete: true, Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	w.logs.wait(t, "va-1 held", func(l logLine) bool {
		return l.is(DecisionHolding, "va-1") && l.attrs["why"] == "it is being deleted (detaching)"
	})
	time.Sleep(2 * testGrace)
	w.touch("va-1")
	time.Sleep(testGrace)
	if l, ok := w.logs.find(func(l logLine) bool { return l.attrs["va"] == "va-1" && l.attrs["decision"] != string(DecisionHolding) }); ok {
		t.Errorf("va-1, being deleted for less than the grace: %v", l)
	}
	if g := testutil.ToFloat64(r.cfg.Metrics.Stale); g != 0 {
		t.Errorf("gauge %v, want 0", g)
	}
	if w.hasEvent("Pod", "waiter", string(vocab.EventStaleVolumeAttachment)) {
		t.Error("the waiting pod got a StaleVolumeAttachment Event")
	}
	if va, err := client.StorageV1().VolumeAttachments().Get(ctx, "va-1", metav1.GetOptions{}); err != nil || len(va.Finalizers) == 0 {
		t.Errorf("va-1: %v, %v", va, err)
	}
}

// testReleased: with the switch on, a stale attachment stuck in deletion
// has its finalizer removed after the re-check, and the API server
// finishes its deletion; counted and recorded. va-gone, stuck on a
// deleted Node, is kept: a person decides.
func testReleased(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	w := newWorld(ctx, t, client)
	w.node("node-a", true)
	w.volume("pv-1", "claim-1")
	w.pod("waiter", "node-b", "claim-1", corev1.PodPending)
	w.stuck("va-1", "node-a", "pv-1", "cannot detach (test)")
	w.volume("pv-2", "claim-2")
	w.stuck("va-gone", "node-gone", "pv-2", "")
	r := w.start(Config{Delete: true})
	l := w.logs.wait(t, "va-1 released", func(l logLine) bool { return l.is(DecisionReleased, "va-1") })
	if l.attrs["finalizers"] != attacherFinalizer || !strings.Contains(l.attrs["reason"], "detach is stuck") {
		t.Errorf("released: %v", l)
	}
	w.waitGone("va-1")
	w.logs.wait(t, "va-gone kept", func(l logLine) bool {
		return l.is(DecisionKept, "va-gone") && strings.Contains(l.attrs["reason"], "no longer exists")
	})
	poll.Until(t, deadline, "1 release counted", func() bool { return testutil.ToFloat64(r.cfg.Metrics.Deleted) == 1 })
	poll.Until(t, deadline, "the gauge at 1 (va-gone)", func() bool { return testutil.ToFloat64(r.cfg.Metrics.Stale) == 1 })
	if va, err := client.StorageV1().VolumeAttachments().Get(ctx, "va-gone", metav1.GetOptions{}); err != nil || len(va.Finalizers) == 0 {
		t.Errorf("va-gone: %v, %v", va, err)
	}
	w.waitEvent("VolumeAttachment", "va-1", string(vocab.EventStaleVolumeAttachmentReleased))
	w.waitEvent("Pod", "waiter", string(vocab.EventStaleVolumeAttachmentReleased))
	if w.hasEvent("VolumeAttachment", "va-1", string(vocab.EventStaleVolumeAttachmentDeleted)) {
		t.Error("a release recorded as a deletion")
	}
}

// testReleaseConflict: the attachment changes between the re-check and
// the update that removes its finalizers; the resourceVersion makes the
// API server refuse (Conflict), and it stays, its finalizer with it,
// until it has been held for the grace again.
func testReleaseConflict(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	w := newWorld(ctx, t, client)
	w.node("node-a", true)
	w.volume("pv-1", "claim-1")
	w.stuck("va-1", "node-a", "pv-1", "")
	hook, release := w.touchFirst(t)
	r := w.start(Config{Delete: true, beforeDelete: hook})
	w.logs.wait(t, "va-1 kept", func(l logLine) bool {
		return l.is(DecisionKept, "va-1") && strings.Contains(l.attrs["reason"], "conflict")
	})
	va, err := client.StorageV1().VolumeAttachments().Get(ctx, "va-1", metav1.GetOptions{})
	if err != nil || va.Annotations["touched"] == "" || !slices.Equal(va.Finalizers, []string{attacherFinalizer}) {
		t.Errorf("va-1 after the refused update: %v, %v", va, err)
	}
	if n := testutil.ToFloat64(r.cfg.Metrics.Deleted); n != 0 {
		t.Errorf("released %v", n)
	}
	w.logs.wait(t, "va-1 held again", func(l logLine) bool { return l.is(DecisionHolding, "va-1") && l.n > 0 })
	close(release)
}

// world is one case's objects, deleted at its end, and its Reporter.
type world struct {
	ctx    context.Context
	t      *testing.T
	client kubernetes.Interface
	logs   *logs
}

func newWorld(ctx context.Context, t *testing.T, client kubernetes.Interface) *world {
	t.Helper()
	w := &world{ctx: ctx, t: t, client: client, logs: &logs{changed: make(chan struct{})}}
	t.Cleanup(w.clean)
	return w
}

// start runs a Reporter with cfg (grace, client, informers, recorder,
// logger and metrics filled in) until the case ends.
func (w *world) start(cfg Config) *Reporter {
	w.t.Helper()
	factory := informers.NewSharedInformerFactory(w.client, 0)
	recorder, stopRecorder := taint.NewRecorder(w.client, "fenced")
	cfg.Client, cfg.Informers, cfg.Recorder, cfg.Grace = w.client, NewInformers(factory), recorder, testGrace
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	cfg.Logger = slog.New(w.logs)
	r, err := New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(w.ctx)
	factory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	w.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("Run: %v", err)
		}
		factory.Shutdown()
		stopRecorder()
	})
	return r
}

func (w *world) node(name string, ready bool) {
	w.t.Helper()
	res := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res}}
	if _, err := w.client.CoreV1().Nodes().Create(w.ctx, n, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.setReady(name, ready)
}

func (w *world) updateNodeStatus(name string, change func(*corev1.Node)) {
	w.t.Helper()
	if err := w.updateNodeStatusErr(name, change); err != nil {
		w.t.Fatal(err)
	}
}

// updateNodeStatusErr is updateNodeStatus for the Reporter's hooks, which
// run outside the test's goroutine.
func (w *world) updateNodeStatusErr(name string, change func(*corev1.Node)) error {
	n, err := w.client.CoreV1().Nodes().Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	change(n)
	_, err = w.client.CoreV1().Nodes().UpdateStatus(w.ctx, n, metav1.UpdateOptions{})
	return err
}

func (w *world) setReady(name string, ready bool) {
	w.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	w.updateNodeStatus(name, func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test",
			LastHeartbeatTime: now, LastTransitionTime: now}}
	})
}

// volumesInUse makes node's kubelet list pv as mounted.
func (w *world) volumesInUse(node, pv string) {
	w.t.Helper()
	w.updateNodeStatus(node, inUse(pv))
}

// inUse adds pv to a Node's volumesInUse.
func inUse(pv string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Status.VolumesInUse = append(n.Status.VolumesInUse, corev1.UniqueVolumeName("kubernetes.io/csi/"+driver+"^"+pv))
	}
}

// volume makes a CSI PersistentVolume (its handle is its name) and a
// claim bound to it.
func (w *world) volume(pv, claim string) {
	w.t.Helper()
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	if _, err := w.client.CoreV1().PersistentVolumes().Create(w.ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{Capacity: size, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: pv}},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: claim}},
	}, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.client.CoreV1().PersistentVolumeClaims(ns).Create(w.ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: size}, VolumeName: pv, StorageClassName: ptr.To("")},
	}, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) attachment(name, node, pv string) {
	w.t.Helper()
	if _, err := w.client.StorageV1().VolumeAttachments().Create(w.ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
	}, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// attacherFinalizer is the finalizer a CSI external-attacher puts on the
// VolumeAttachments it attaches (external-attacher/<driver, with "." as
// "-">).
const attacherFinalizer = "external-attacher/csi-fenced-test"

// stuck makes a VolumeAttachment the way seed 000 leaves one on a real
// attach/detach controller: attached, the external-attacher's finalizer
// on it, deleted (so it has a deletionTimestamp and stays), and, unless
// detachErr is empty, the CSI driver's detach error in its status.
func (w *world) stuck(name, node, pv, detachErr string) {
	w.t.Helper()
	va, err := w.client.StorageV1().VolumeAttachments().Create(w.ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{attacherFinalizer}},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
	}, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	va.Status.Attached = true
	if _, err := w.client.StorageV1().VolumeAttachments().UpdateStatus(w.ctx, va, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	if err := w.client.StorageV1().VolumeAttachments().Delete(w.ctx, name, metav1.DeleteOptions{}); err != nil {
		w.t.Fatal(err)
	}
	if detachErr != "" {
		w.detachError(name, detachErr)
	}
}

// detachError sets the VolumeAttachment's status.detachError, as the
// external-attacher does after each failed detach.
func (w *world) detachError(name, msg string) {
	w.t.Helper()
	va, err := w.client.StorageV1().VolumeAttachments().Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	va.Status.DetachError = &storagev1.VolumeError{Time: metav1.Now(), Message: msg}
	if _, err := w.client.StorageV1().VolumeAttachments().UpdateStatus(w.ctx, va, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// unfinalize removes a VolumeAttachment's finalizers, as the
// external-attacher does once the driver detached.
func (w *world) unfinalize(name string) {
	w.t.Helper()
	if _, err := w.client.StorageV1().VolumeAttachments().Patch(w.ctx, name, types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// pod makes a pod bound to node using claim, in phase.
func (w *world) pod(name, node, claim string, phase corev1.PodPhase) {
	w.t.Helper()
	p, err := w.client.CoreV1().Pods(ns).Create(w.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	if phase != corev1.PodPending {
		p.Status.Phase = phase
		if _, err := w.client.CoreV1().Pods(ns).UpdateStatus(w.ctx, p, metav1.UpdateOptions{}); err != nil {
			w.t.Fatal(err)
		}
	}
}

// touch changes the VolumeAttachment (an annotation), as a CSI
// attacher's status write would.
func (w *world) touch(va string) {
	w.t.Helper()
	if err := w.touchErr(va); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) touchErr(va string) error {
	o, err := w.client.StorageV1().VolumeAttachments().Get(w.ctx, va, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if o.Annotations == nil {
		o.Annotations = map[string]string{}
	}
	o.Annotations["touched"] = time.Now().Format(time.RFC3339Nano)
	_, err = w.client.StorageV1().VolumeAttachments().Update(w.ctx, o, metav1.UpdateOptions{})
	return err
}

func (w *world) waitGone(va string) {
	w.t.Helper()
	poll.Until(w.t, deadline, va+" deleted", func() bool {
		_, err := w.client.StorageV1().VolumeAttachments().Get(w.ctx, va, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func (w *world) events(kind, name, reason string) []corev1.Event {
	w.t.Helper()
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "reason": reason}.AsSelector().String()
	l, err := w.client.CoreV1().Events(ns).List(w.ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		w.t.Fatal(err)
	}
	return l.Items
}

func (w *world) hasEvent(kind, name, reason string) bool {
	return len(w.events(kind, name, reason)) > 0
}

func (w *world) waitEvent(kind, name, reason string) {
	w.t.Helper()
	poll.Until(w.t, deadline, fmt.Sprintf("Event %s on %s %s", reason, kind, name), func() bool { return w.hasEvent(kind, name, reason) })
}

// clean deletes every object a case made (and the Events), so the next
// case's Reporter sees none of them.
func (w *world) clean() {
	ctx, c := context.Background(), w.client
	all := metav1.ListOptions{}
	grace := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	_ = c.StorageV1().VolumeAttachments().DeleteCollection(ctx, metav1.DeleteOptions{}, all)
	_ = c.CoreV1().Pods(ns).DeleteCollection(ctx, grace, all)
	_ = c.CoreV1().PersistentVolumeClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
	_ = c.CoreV1().PersistentVolumes().DeleteCollection(ctx, metav1.DeleteOptions{}, all)
	_ = c.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, all)
	_ = c.CoreV1().Events(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
	// The StorageObjectInUseProtection admission plugin put finalizers on
	// the claims and volumes that no controller here removes; the stuck
	// attachments carry the external-attacher's.
	unfinalize := []byte(`{"metadata":{"finalizers":null}}`)
	if l, err := c.StorageV1().VolumeAttachments().List(ctx, all); err == nil {
		for _, o := range l.Items {
			_, _ = c.StorageV1().VolumeAttachments().Patch(ctx, o.Name, types.MergePatchType, unfinalize, metav1.PatchOptions{})
		}
	}
	if l, err := c.CoreV1().PersistentVolumeClaims(ns).List(ctx, all); err == nil {
		for _, o := range l.Items {
			_, _ = c.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, o.Name, types.MergePatchType, unfinalize, metav1.PatchOptions{})
		}
	}
	if l, err := c.CoreV1().PersistentVolumes().List(ctx, all); err == nil {
		for _, o := range l.Items {
			_, _ = c.CoreV1().PersistentVolumes().Patch(ctx, o.Name, types.MergePatchType, unfinalize, metav1.PatchOptions{})
		}
	}
	// Pods without a kubelet go at once with grace 0; wait so that names
	// can be reused.
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, deadline, true, func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods(ns).List(ctx, all)
		vas, err2 := c.StorageV1().VolumeAttachments().List(ctx, all)
		pvs, err3 := c.CoreV1().PersistentVolumes().List(ctx, all)
		pvcs, err4 := c.CoreV1().PersistentVolumeClaims(ns).List(ctx, all)
		return err == nil && err2 == nil && err3 == nil && err4 == nil && len(pods.Items)+len(vas.Items)+len(pvs.Items)+len(pvcs.Items) == 0, nil
	})
}

func waitDefaultServiceAccount(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	poll.Until(t, deadline, "ServiceAccount default/default", func() bool {
		_, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
}

func waitCheck(t *testing.T, checks <-chan []diagnose.Refusal, ok func([]diagnose.Refusal) bool) {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case rs := <-checks:
			if ok(rs) {
				return
			}
		case <-timeout:
			t.Fatalf("no check with the expected refusal within %s", deadline)
		}
	}
}

// logLine is one "stale volumeattachment" record; n counts the earlier
// lines with the same decision and attachment.
type logLine struct {
	attrs map[string]string
	n     int
}

func (l logLine) is(d Decision, va string) bool {
	return l.attrs["decision"] == string(d) && l.attrs["va"] == va
}

// logs is a slog handler keeping the Reporter's decisions.
type logs struct {
	mu      sync.Mutex
	lines   []logLine
	changed chan struct{}
}

func (h *logs) Enabled(context.Context, slog.Level) bool { return true }
func (h *logs) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "stale volumeattachment" {
		return nil
	}
	l := logLine{attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range h.lines {
		if o.attrs["decision"] == l.attrs["decision"] && o.attrs["va"] == l.attrs["va"] {
			l.n++
		}
	}
	h.lines = append(h.lines, l)
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
}
func (h *logs) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logs) WithGroup(string) slog.Handler      { return h }

func (h *logs) find(match func(logLine) bool) (logLine, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.lines {
		if match(l) {
			return l, true
		}
	}
	return logLine{}, false
}

// wait waits for a line that matches.
func (h *logs) wait(t *testing.T, what string, match func(logLine) bool) logLine {
	t.Helper()
	timeout := time.After(deadline)
	for {
		h.mu.Lock()
		ch := h.changed
		h.mu.Unlock()
		if l, ok := h.find(match); ok {
			return l
		}
		select {
		case <-ch:
		case <-timeout:
			h.mu.Lock()
			defer h.mu.Unlock()
			t.Fatalf("no log line: %s within %s; lines: %v", what, deadline, h.lines)
			return logLine{}
		}
	}
}

// touchFirst returns a beforeDelete hook that changes the attachment the
// first time (right after the re-check read it) and holds every later
// attempt until release is closed, so that the test can look first.
func (w *world) touchFirst(t *testing.T) (hook func(context.Context, string), release chan struct{}) {
	release = make(chan struct{})
	var calls atomic.Int32
	return func(_ context.Context, va string) {
		if calls.Add(1) == 1 {
			if err := w.touchErr(va); err != nil {
				t.Errorf("touching %s: %v", va, err)
			}
			return
		}
		<-release
	}, release
}
