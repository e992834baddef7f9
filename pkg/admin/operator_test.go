package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

var t0 = time.Date(2026, 11, 21, 3, 0, 0, 0, time.UTC)

const (
	nodeUUID = "4c4c4544-0042-3510-8052-b4c04f4d4e31"
	bootA    = "boot-a"
	bootB    = "boot-b"
)

// fakeBMC is a BMC whose power is a variable.
type fakeBMC struct {
	mu       sync.Mutex
	state    vocab.PowerState
	err      error // returned by PowerState
	guid     string
	offCalls int
}

func (b *fakeBMC) PowerState(context.Context) (vocab.PowerState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return vocab.PowerUnknown, b.err
	}
	return b.state, nil
}

func (b *fakeBMC) PowerOff(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.offCalls++
	b.state = vocab.PowerOff
	return nil
}

func (b *fakeBMC) PowerOn(context.Context) error    { return nil }
func (b *fakeBMC) PowerCycle(context.Context) error { return nil }
func (b *fakeBMC) Close() error                     { return nil }

func (b *fakeBMC) SystemGUID(context.Context) (string, error) {
	if b.guid == "" {
		return "", &device.Error{Op: vocab.OpSystemGUID, Kind: vocab.KindNotSupported, Err: errors.New("no GUID")}
	}
	return b.guid, nil
}

func (b *fakeBMC) off() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.offCalls
}

// fakeInventory maps node names to fake BMCs.
type fakeInventory map[string]*fakeBMC

func (i fakeInventory) BMC(node string) (device.BMC, bool) {
	b, ok := i[node]
	if !ok {
		return nil, false
	}
	return b, true
}

func (i fakeInventory) Endpoint(node string) (string, bool) {
	_, ok := i[node]
	return "ipmi://bmc-" + node + ":623", ok
}

func timeoutErr(node string) error {
	return &device.Error{Node: node, Op: vocab.OpPowerStatus, Endpoint: "ipmi://bmc-" + node + ":623",
		Kind: vocab.KindTimeout, Err: context.DeadlineExceeded}
}

// newNode is a Node as its kubelet left it: Ready since an hour before t0.
func newNode(name string, ready corev1.ConditionStatus, mods ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Status: corev1.NodeStatus{
			NodeInfo: corev1.NodeSystemInfo{BootID: bootA, SystemUUID: nodeUUID},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady",
				LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}},
		},
	}
	for _, m := range mods {
		m(n)
	}
	return n
}

// fencedByNewer puts fenced's taint on a node, with evidence in format 2,
// which this fenced does not read.
func fencedByNewer(n *corev1.Node) {
	foreignTaint(n)
	n.Annotations = map[string]string{taint.AnnotationAppliedBy: "fencer-9",
		taint.AnnotationEvidence: `{"v":2,"method":"bmc-power-off","by":"fencer-9","at":"2026-03-01T02:50:00Z","bootID":"boot-a"}`}
}

// fencedWith puts fenced's taint on a node, with evidence for boot.
func fencedWith(boot string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		ev, _ := json.Marshal(core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "fencer-1", At: t0.Add(-10 * time.Minute), BootID: boot,
			Reason: "lost power", BMC: &core.Reading{Power: "off", At: t0.Add(-10 * time.Minute), Endpoint: "ipmi://x:623"}})
		foreignTaint(n)
		n.Annotations = map[string]string{taint.AnnotationAppliedBy: "fencer-1", taint.AnnotationEvidence: string(ev)}
	}
}

func foreignTaint(n *corev1.Node) {
	added := metav1.NewTime(t0.Add(-10 * time.Minute))
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: taint.TaintKey, Value: taint.TaintValue, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added})
}

type env struct {
	op  *Operator
	cs  *fake.Clientset
	rec *record.FakeRecorder
	out *bytes.Buffer
	log *bytes.Buffer
}

// newEnv returns an Operator on a fake clientset holding objs, whose
// SelfSubjectReview says the caller is "alice".
func newEnv(inv Inventory, objs ...runtime.Object) *env {
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authnv1.SelfSubjectReview{Status: authnv1.SelfSubjectReviewStatus{
			UserInfo: authnv1.UserInfo{Username: "alice"}}}, nil
	})
	e := &env{cs: cs, rec: record.NewFakeRecorder(100), out: &bytes.Buffer{}, log: &bytes.Buffer{}}
	e.op = &Operator{Client: cs, Inventory: inv, Recorder: e.rec, Out: e.out,
		Log: slog.New(slog.NewTextHandler(e.log, nil)), Now: func() time.Time { return t0 },
		Verify: device.VerifyOptions{PowerWait: time.Millisecond, Interval: time.Millisecond, Timeout: time.Second}}
	return e
}

func (e *env) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) events() []string {
	var evs []string
	for {
		select {
		case ev := <-e.rec.Events:
			evs = append(evs, ev)
		default:
			return evs
		}
	}
}

func (e *env) writes() int {
	n := 0
	for _, a := range e.cs.Actions() {
		if a.GetVerb() == "update" || a.GetVerb() == "patch" || a.GetVerb() == "delete" {
			n++
		}
	}
	return n
}

func hasEvent(evs []string, prefix string, contains ...string) bool {
	for _, ev := range evs {
		if !strings.HasPrefix(ev, prefix) {
			continue
		}
		ok := true
		for _, c := range contains {
			ok = ok && strings.Contains(ev, c)
		}
		if ok {
			return true
		}
	}
	return false
}

func TestConfirmRefusesWhenBMCReadsOn(t *testing.T) {
	bmc := &fakeBMC{state: vocab.PowerOn, guid: nodeUUID}
	e := newEnv(fakeInventory{"n1": bmc}, newNode("n1", corev1.ConditionUnknown))
	err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Consent: Consent{Yes: true}, Reason: "r"})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "power ON") {
		t.Fatalf("err = %v, want a refusal because the power is on", err)
	}
	if taint.HasTaint(e.node(t, "n1")) || bmc.off() != 0 || e.writes() != 0 {
		t.Fatalf("refusal wrote something: taint %v, power-offs %d, writes %d", taint.HasTaint(e.node(t, "n1")), bmc.off(), e.writes())
	}
	if !strings.Contains(e.out.String(), "power on, system GUID "+nodeUUID+" (matches") {
		t.Errorf("output does not show the reading:\n%s", e.out)
	}
}

func TestConfirmRefusesAnotherMachinesBMC(t *testing.T) {
	bmc := &fakeBMC{state: vocab.PowerOn, guid: "00000000-1111-2222-3333-444444444444"}
	e := newEnv(fakeInventory{"n1": bmc}, newNode("n1", corev1.ConditionUnknown))
	err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Consent: Consent{Yes: true}, PowerOff: true})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "another machine") {
		t.Fatalf("err = %v", err)
	}
	if bmc.off() != 0 || e.writes() != 0 {
		t.Fatal("switched off or wrote despite a GUID mismatch")
	}
}

func TestConfirmPowerOffSwitchesOffThenTaints(t *testing.T) {
	bmc := &fakeBMC{state: vocab.PowerOn, guid: nodeUUID}
	e := newEnv(fakeInventory{"n1": bmc}, newNode("n1", corev1.ConditionUnknown))
	if err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Consent: Consent{Yes: true}, PowerOff: true, Reason: "hung"}); err != nil {
		t.Fatalf("Confirm: %v\n%s", err, e.out)
	}
	if bmc.off() != 1 {
		t.Fatalf("power-off requests = %d, want 1", bmc.off())
	}
	ev, ok, err := taint.EvidenceOf(e.node(t, "n1"))
	if !ok || err != nil || ev.Method != vocab.EvidenceManual || ev.BMC == nil || ev.BMC.Power != "off" ||
		!ev.BMC.PoweredOffByFenced || ev.BMC.SystemGUID != nodeUUID {
		t.Fatalf("evidence = %+v (%v, %v)", ev, ok, err)
	}
	if !strings.Contains(e.out.String(), "Switching node n1 off") {
		t.Errorf("output:\n%s", e.out)
	}
}

func TestConfirmNeedsATerminalOrYes(t *testing.T) {
	cases := []struct {
		name      string
		terminal  bool
		answer    string
		wantTaint bool
	}{
		{"terminal, answer n", true, "n\n", false},
		{"terminal, empty answer", true, "\n", false},
		{"terminal, answer y", true, "y\n", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, newNode("n1", corev1.ConditionUnknown))
			err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Consent: Consent{Terminal: tc.terminal, In: strings.NewReader(tc.answer)}})
			if tc.wantTaint != (err == nil) || (err != nil && !errors.Is(err, ErrRefused)) {
				t.Fatalf("err = %v", err)
			}
			if got := taint.HasTaint(e.node(t, "n1")); got != tc.wantTaint {
				t.Fatalf("tainted = %v, want %v", got, tc.wantTaint)
			}
			if !strings.Contains(e.out.String(), "WARNING: if node n1 is not really powered off, two machines will write to the same disks") {
				t.Errorf("no warning:\n%s", e.out)
			}
		})
	}
}

// TestDangerousCommandsWithoutTerminalOrYes: confirm, unfence --force and a
// power action by hand, run without a terminal and without --yes, do
// nothing at all — no read, no write, no Event — and say to pass --yes.
func TestDangerousCommandsWithoutTerminalOrYes(t *testing.T) {
	noTTY := Consent{In: strings.NewReader("y\n")} // an answer nobody typed: a pipe
	for _, tc := range []struct {
		name string
		run  func(*env) error
	}{
		{"confirm", func(e *env) error {
			return e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Reason: "r", Consent: noTTY})
		}},
		{"unfence --force", func(e *env) error {
			return e.op.Unfence(context.Background(), UnfenceOptions{Node: "n1", Force: true, Reason: "r", Consent: noTTY})
		}},
		{"bmc off", func(e *env) error {
			return e.op.AllowPower(context.Background(), ByHand{Consent: noTTY}.About("n1", PowerOff, "its BMC", "fenced bmc"))
		}},
		{"device cycle", func(e *env) error {
			return e.op.AllowPower(context.Background(), ByHand{Consent: noTTY}.About("n1", PowerCycle, "level 2", "fenced device"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bmc := &fakeBMC{state: vocab.PowerOff, guid: nodeUUID}
			e := newEnv(fakeInventory{"n1": bmc}, newNode("n1", corev1.ConditionFalse, fencedWith(bootA)))
			err := tc.run(e)
			if !errors.Is(err, ErrNeedsYes) || !strings.Contains(err.Error(), "pass --yes") {
				t.Fatalf("err = %v, want ErrNeedsYes", err)
			}
			if n := len(e.cs.Actions()); n != 0 || len(e.events()) != 0 || e.out.Len() != 0 {
				t.Fatalf("did something: %d API calls, output %q", n, e.out)
			}
		})
	}
}

func TestConsent(t *testing.T) {
	for _, tc := range []struct {
		name             string
		c                Consent
		wantCheck, wantA error
	}{
		{"--yes", Consent{Yes: true}, nil, nil},
		{"--yes, no terminal", Consent{Yes: true, In: strings.NewReader("")}, nil, nil},
		{"no terminal", Consent{In: strings.NewReader("y\n")}, ErrNeedsYes, ErrNeedsYes},
		{"terminal, no reader", Consent{Terminal: true}, ErrNeedsYes, ErrNeedsYes},
		{"terminal, y", Consent{Terminal: true, In: strings.NewReader("y\n")}, nil, nil},
		{"terminal, YES", Consent{Terminal: true, In: strings.NewReader(" YES \n")}, nil, nil},
		{"terminal, n", Consent{Terminal: true, In: strings.NewReader("n\n")}, nil, ErrRefused},
		{"terminal, end of input", Consent{Terminal: true, In: strings.NewReader("")}, nil, ErrRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.c.Check(); !errors.Is(err, tc.wantCheck) || (tc.wantCheck == nil && err != nil) {
				t.Errorf("Check() = %v, want %v", err, tc.wantCheck)
			}
			var out bytes.Buffer
			err := tc.c.Ask(context.Background(), &out, "Go?")
			if !errors.Is(err, tc.wantA) || (tc.wantA == nil && err != nil) {
				t.Errorf("Ask() = %v, want %v", err, tc.wantA)
			}
			if asked := strings.Contains(out.String(), "Go? [y/N]"); asked != (tc.c.Terminal && tc.c.In != nil && !tc.c.Yes) {
				t.Errorf("asked %v: %q", asked, out.String())
			}
		})
	}
}

// TestAllowPowerRecordsWhoAndWhy: a power action by hand, once the
// operator has said yes, leaves a Warning Event on the Node naming the
// caller, the action, the device and the reason; a no leaves nothing.
func TestAllowPowerRecordsWhoAndWhy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		op     PowerOp
		c      Consent
		reason vocab.EventReason
		want   error
	}{
		{"off, --yes", PowerOff, Consent{Yes: true}, vocab.EventManualPowerOff, nil},
		{"cycle, answered y", PowerCycle, Consent{Terminal: true, In: strings.NewReader("y\n")}, vocab.EventManualPowerCycle, nil},
		{"off, answered n", PowerOff, Consent{Terminal: true, In: strings.NewReader("n\n")}, "", ErrRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, newNode("n1", corev1.ConditionTrue))
			err := e.op.AllowPower(context.Background(), ByHand{Reason: "hung, OPS-1", Consent: tc.c}.About("n1", tc.op, "its BMC ipmi://bmc-n1:623", "fenced bmc"))
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			evs := e.events()
			if tc.reason == "" {
				if len(evs) != 0 {
					t.Fatalf("events after a no: %q", evs)
				}
				return
			}
			if !hasEvent(evs, "Warning "+string(tc.reason), "alice", "ipmi://bmc-n1:623", "fenced bmc "+string(tc.op), "hung, OPS-1") {
				t.Errorf("events = %q", evs)
			}
			if !strings.Contains(e.out.String(), "you: alice") {
				t.Errorf("output:\n%s", e.out)
			}
		})
	}
}

func TestConfirmYesRecordsManualEvidence(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "app", UID: "p1"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "app", UID: "p2"}, Spec: corev1.PodSpec{NodeName: "n2"}}
	bmcs := fakeInventory{
		"n1": {err: timeoutErr("n1")}, // unreadable: the operator's word is the evidence
		"n2": {state: vocab.PowerOff, guid: nodeUUID},
	}
	e := newEnv(bmcs, newNode("n1", corev1.ConditionUnknown), newNode("n2", corev1.ConditionTrue), pod, other)

	if err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Consent: Consent{Yes: true}, Reason: "PSU dead"}); err != nil {
		t.Fatalf("Confirm: %v\n%s", err, e.out)
	}
	n := e.node(t, "n1")
	ev, ok, err := taint.EvidenceOf(n)
	if !ok || err != nil || ev.Method != vocab.EvidenceManual || ev.By != "alice" || ev.Reason != "PSU dead" ||
		!ev.At.Equal(t0) || ev.BootID != bootA || ev.BMC != nil {
		t.Fatalf("evidence = %+v (%v, %v)", ev, ok, err)
	}
	if n.Annotations[taint.AnnotationAppliedBy] != "fenced-confirm/alice" {
		t.Errorf("applied-by = %q", n.Annotations[taint.AnnotationAppliedBy])
	}
	// n1's Ready=Unknown (the node lifecycle controller's) already means
	// not ready to the pod GC: it is left alone, not written over.
	if c := taint.ReadyCondition(n); c.Status != corev1.ConditionUnknown {
		t.Errorf("Ready = %+v", c)
	}
	if _, err := e.cs.CoreV1().Pods("app").Get(context.Background(), "db-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod of n1 not deleted: %v", err)
	}
	if _, err := e.cs.CoreV1().Pods("app").Get(context.Background(), "web", metav1.GetOptions{}); err != nil {
		t.Errorf("pod of n2: %v", err)
	}
	out := e.out.String()
	for _, want := range []string{"power state could NOT be read (timeout)", "not a refusal", "gossip:      not checked", "you:         alice"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	evs := e.events()
	if !hasEvent(evs, "Normal "+string(vocab.EventOutOfServiceTaintApplied), "manual") ||
		!hasEvent(evs, "Warning "+string(vocab.EventManualFenceConfirmed), "alice", "PSU dead") {
		t.Errorf("events = %q", evs)
	}

	// A BMC reading of off goes into the evidence.
	if err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n2", Consent: Consent{Yes: true}}); err != nil {
		t.Fatal(err)
	}
	ev, _, _ = taint.EvidenceOf(e.node(t, "n2"))
	if ev.BMC == nil || ev.BMC.Power != "off" || ev.BMC.PoweredOffByFenced || ev.BMC.Endpoint != "ipmi://bmc-n2:623" {
		t.Fatalf("evidence BMC = %+v", ev.BMC)
	}
}

// TestConfirmOnExcludedNode: the exclusion label keeps fenced's automatic
// actions away, not a person's: confirm says so and goes on.
func TestConfirmOnExcludedNode(t *testing.T) {
	n := newNode("n1", corev1.ConditionUnknown)
	n.Labels = map[string]string{taint.Medik8sExcludeLabel: "true"}
	e := newEnv(fakeInventory{"n1": {state: vocab.PowerOff, guid: nodeUUID}}, n)
	if err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Consent: Consent{Yes: true}, Reason: "maintenance, checked on site"}); err != nil {
		t.Fatalf("Confirm: %v\n%s", err, e.out)
	}
	if !taint.HasTaint(e.node(t, "n1")) {
		t.Error("not tainted")
	}
	if !strings.Contains(e.out.String(), "excluded:    yes ("+taint.Medik8sExcludeLabel+"=true)") {
		t.Errorf("output does not say the node is excluded:\n%s", e.out)
	}
}

func TestConfirmFallsBackToUnknownIdentity(t *testing.T) {
	e := newEnv(nil, newNode("n1", corev1.ConditionUnknown))
	e.cs.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}, "", errors.New("no"))
	})
	if err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Consent: Consent{Yes: true}}); err != nil {
		t.Fatal(err)
	}
	if ev, _, _ := taint.EvidenceOf(e.node(t, "n1")); ev.By != UnknownIdentity {
		t.Fatalf("by = %q", ev.By)
	}
	if !strings.Contains(e.out.String(), `WARNING: could not ask the API server who you are`) {
		t.Errorf("no warning:\n%s", e.out)
	}
}

func TestConfirmOnFencedNodeIsANoop(t *testing.T) {
	for name, mod := range map[string]func(*corev1.Node){"fenced": fencedWith(bootA), "foreign": foreignTaint} {
		t.Run(name, func(t *testing.T) {
			bmc := &fakeBMC{state: vocab.PowerOn}
			e := newEnv(fakeInventory{"n1": bmc}, newNode("n1", corev1.ConditionFalse, mod))
			if err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Consent: Consent{Yes: true}, PowerOff: true}); err != nil {
				t.Fatal(err)
			}
			if e.writes() != 0 || bmc.off() != 0 || len(e.events()) != 0 {
				t.Fatalf("writes %d, power-offs %d", e.writes(), bmc.off())
			}
			if !strings.Contains(e.out.String(), "nothing to do") {
				t.Errorf("output:\n%s", e.out)
			}
		})
	}
}

// squash collapses runs of white space, so that tests don't depend on
// column widths.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

func va(name, node string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.VolumeAttachmentSpec{NodeName: node}}
}

func TestUnfence(t *testing.T) {
	rebooted := func(n *corev1.Node) { n.Status.NodeInfo.BootID = bootB }
	cases := []struct {
		name       string
		node       *corev1.Node
		extra      []runtime.Object
		force      bool
		wantErr    string // "" means success
		wantOut    []string
		wantRemove bool
	}{
		{"foreign taint", newNode("n1", corev1.ConditionTrue, foreignTaint, rebooted), nil, false,
			"not applied by fenced", nil, false},
		{"foreign taint, forced", newNode("n1", corev1.ConditionTrue, foreignTaint, rebooted), nil, true,
			"not applied by fenced", nil, false},
		{"same boot ID", newNode("n1", corev1.ConditionTrue, fencedWith(bootA)), nil, false,
			"failed check(s): new boot ID", []string{"[FAIL] new boot ID:", "same boot ID boot-a", "[ok  ] ready:"}, false},
		{"not ready", newNode("n1", corev1.ConditionUnknown, fencedWith(bootA), rebooted), nil, false,
			"failed check(s): ready", []string{"[FAIL] ready:"}, false},
		{"volume attachment left", newNode("n1", corev1.ConditionTrue, fencedWith(bootA), rebooted),
			[]runtime.Object{va("csi-123", "n1"), va("csi-456", "n2")}, false,
			"failed check(s): volume attachments", []string{"[FAIL] volume attachments: 1 left: csi-123"}, false},
		{"new boot, no VA", newNode("n1", corev1.ConditionTrue, fencedWith(bootA), rebooted),
			[]runtime.Object{va("csi-456", "n2")}, false,
			"", []string{"[ok  ] new boot ID:", "boot-b (fenced at boot boot-a)", "[ok  ] volume attachments: none", "Removed"}, true},
		{"forced", newNode("n1", corev1.ConditionTrue, fencedWith(bootA)), []runtime.Object{va("csi-123", "n1")}, true,
			"", []string{"[FAIL] new boot ID:", "Removed"}, true},
		{"fenced by a newer fenced", newNode("n1", corev1.ConditionTrue, fencedByNewer, rebooted), nil, false,
			"fenced by a newer fenced (evidence format 2", nil, false},
		{"fenced by a newer fenced, forced", newNode("n1", corev1.ConditionTrue, fencedByNewer, rebooted), nil, true,
			"--force does not change that", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, append(tc.extra, tc.node)...)
			unfence(t, e, tc.force, tc.wantErr, tc.wantOut)
			n := e.node(t, "n1")
			if removed := !taint.HasTaint(n); removed != tc.wantRemove {
				t.Fatalf("taint removed = %v, want %v", removed, tc.wantRemove)
			}
			// Removed as a fencer removes it: the returning taint in its
			// place, the node cordoned for the controller-manager to answer.
			if tc.wantRemove && (!taint.HasReturningTaint(n) || !n.Spec.Unschedulable || !strings.Contains(e.out.String(), taint.ReturningTaintKey)) {
				t.Fatalf("removed without the returning taint: %+v\n%s", n.Spec, e.out)
			}
			evs := e.events()
			if tc.wantRemove && !hasEvent(evs, "Normal "+string(vocab.EventOutOfServiceTaintRemoved), "alice", "back") {
				t.Errorf("events = %q", evs)
			}
			forcedEvent := hasEvent(evs, "Warning "+string(vocab.EventUnfenceForced), "alice", "--force", "new boot ID", "back")
			forcedLog := strings.Contains(e.log.String(), "unfence forced")
			if tc.wantRemove && tc.force != (forcedEvent && forcedLog) {
				t.Errorf("forced: event %v log %v; events %q log %q", forcedEvent, forcedLog, evs, e.log)
			}
			if !tc.wantRemove && e.writes() != 0 {
				t.Errorf("a refusal wrote %d times", e.writes())
			}
		})
	}
}

// unfence runs Unfence on node n1 with reason "back" and checks its
// refusal (wantErr "" for none) and its output.
func unfence(t *testing.T, e *env, force bool, wantErr string, wantOut []string) {
	t.Helper()
	err := e.op.Unfence(context.Background(), UnfenceOptions{Node: "n1", Force: force, Reason: "back", Consent: Consent{Yes: force}})
	if wantErr == "" && err != nil {
		t.Fatalf("Unfence: %v\n%s", err, e.out)
	}
	if wantErr != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), wantErr)) {
		t.Fatalf("err = %v, want a refusal containing %q", err, wantErr)
	}
	for _, w := range wantOut {
		if !strings.Contains(squash(e.out.String()), squash(w)) {
			t.Errorf("output lacks %q:\n%s", w, e.out)
		}
	}
}

// returningNode is a node whose out-of-service taint `fenced unfence`
// (or a fencer) took off: fenced's returning taint and record are on, the
// node cordoned by fenced; answered says whether the node lifecycle
// controller has answered that cordon.
func returningNode(answered bool) *corev1.Node {
	return newNode("n1", corev1.ConditionTrue, func(n *corev1.Node) {
		raw, _ := json.Marshal(core.Returning{At: t0.Add(-time.Minute), By: "fenced-unfence/bob", Cordoned: true})
		n.Annotations = map[string]string{taint.AnnotationReturning: string(raw)}
		n.Spec.Taints = []corev1.Taint{{Key: taint.ReturningTaintKey, Effect: corev1.TaintEffectNoExecute}}
		n.Spec.Unschedulable = true
		if answered {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
		}
	})
}

// TestUnfenceReturning: on a node whose out-of-service taint is off,
// unfence lifts fenced's returning taint once the controller-manager has
// observed the removal, and before that only with --force, recorded.
func TestUnfenceReturning(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answered bool
		force    bool
		wantErr  string
		wantOut  []string
	}{
		{"not answered", false, false, "keeps " + taint.ReturningTaintKey, []string{"[FAIL] controller-manager:", "no answer yet"}},
		{"answered", true, false, "", []string{"[ok  ] controller-manager:", "Lifted"}},
		{"not answered, forced", false, true, "", []string{"[FAIL] controller-manager:", "Lifted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, returningNode(tc.answered))
			unfence(t, e, tc.force, tc.wantErr, tc.wantOut)
			n := e.node(t, "n1")
			lifted := tc.wantErr == ""
			if taint.HasReturningTaint(n) == lifted || n.Spec.Unschedulable == lifted {
				t.Fatalf("lifted %v, want %v: %+v", !taint.HasReturningTaint(n), lifted, n.Spec)
			}
			evs := e.events()
			if lifted && !hasEvent(evs, "Normal "+string(vocab.EventReturningTaintLifted), "alice", "back") {
				t.Errorf("events = %q", evs)
			}
			if forced := hasEvent(evs, "Warning "+string(vocab.EventUnfenceForced), "alice", "--force", "back"); forced != tc.force {
				t.Errorf("UnfenceForced Event %v, want %v: %q", forced, tc.force, evs)
			}
			if !lifted && e.writes() != 0 {
				t.Errorf("a refusal wrote %d times", e.writes())
			}
		})
	}
}

// TestUnfenceForceAsks: on a terminal, --force asks before it skips a
// failed check, and a no changes nothing; checks that pass need no question.
func TestUnfenceForceAsks(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		node         *corev1.Node
		wantErr      error
		asked        bool
	}{
		{"failed check, answered n", "n\n", newNode("n1", corev1.ConditionTrue, fencedWith(bootA)), ErrRefused, true},
		{"failed check, answered y", "y\n", newNode("n1", corev1.ConditionTrue, fencedWith(bootA)), nil, true},
		{"checks pass: not asked", "", newNode("n1", corev1.ConditionTrue, fencedWith(bootB)), nil, false},
		{"returning, not answered, answered n", "n\n", returningNode(false), ErrRefused, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(nil, tc.node)
			err := e.op.Unfence(context.Background(), UnfenceOptions{Node: "n1", Force: true, Reason: "r",
				Consent: Consent{Terminal: true, In: strings.NewReader(tc.answer)}})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v\n%s", err, tc.wantErr, e.out)
			}
			if asked := strings.Contains(e.out.String(), "[y/N]"); asked != tc.asked {
				t.Errorf("asked %v, want %v:\n%s", asked, tc.asked, e.out)
			}
			if tc.wantErr != nil && e.writes() != 0 {
				t.Errorf("a no wrote %d times", e.writes())
			}
		})
	}
}

const agentMetrics = `# HELP fenced_members Gossip ring members by state.
# TYPE fenced_members gauge
fenced_members{state="alive"} 2
fenced_members{state="dead"} 1
fenced_members{state="left"} 0
# HELP fenced_node_state Phase.
# TYPE fenced_node_state gauge
fenced_node_state{node="healthy",state="Healthy"} 1
fenced_node_state{node="fenced",state="Fenced"} 1
# HELP fenced_node_fence_levels_ready Levels.
# TYPE fenced_node_fence_levels_ready gauge
fenced_node_fence_levels_ready{node="healthy"} 2
fenced_node_fence_levels_ready{node="hung"} 0
# HELP fenced_paused Paused.
# TYPE fenced_paused gauge
fenced_paused 1
# HELP fenced_dry_run Dry-run.
# TYPE fenced_dry_run gauge
fenced_dry_run 1
`

func TestStatus(t *testing.T) {
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, agentMetrics)
	}))
	defer agent.Close()

	bmcs := fakeInventory{
		"healthy": {state: vocab.PowerOn},
		"fenced":  {state: vocab.PowerOff},
		"hung":    {err: timeoutErr("hung")},
	}
	fencedNode := newNode("fenced", corev1.ConditionFalse, fencedWith(bootA))
	fencedNode.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(-3 * time.Minute))
	healthy := newNode("healthy", corev1.ConditionTrue)
	healthy.Labels = map[string]string{taint.ExcludeLabel: "true"}
	e := newEnv(bmcs, healthy, fencedNode,
		newNode("foreign", corev1.ConditionUnknown, foreignTaint), newNode("hung", corev1.ConditionUnknown))

	s, err := e.op.Status(context.Background(), StatusOptions{AgentURL: agent.URL, BMCTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := printer.Print(&table, "", s.Doc(t0)); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"NAME":    {"READY", "PHASE", "POWER", "LEVELS", "TAINT", "EVIDENCE", "SINCE", "FENCING"},
		"fenced":  {"False", "3m", "Fenced", "off", "-", "fenced", "bmc-power-off", "by", "fencer-1", "10m", "-"},
		"foreign": {"Unknown", "60m", "-", "-", "-", "other", "-", "10m", "-"},
		"healthy": {"True", "60m", "Healthy", "on", "2", "-", "-", "-", "excluded"},
		"hung":    {"Unknown", "60m", "-", "timeout", "0", "(cannot", "fence)", "-", "-", "-", "-"},
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) < 5 {
		t.Fatalf("table:\n%s", table.String())
	}
	for i, name := range []string{"NAME", "fenced", "foreign", "healthy", "hung"} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != name+" "+strings.Join(want[name], " ") {
			t.Errorf("row %d = %q, want %q", i, got, append([]string{name}, want[name]...))
		}
	}
	if !strings.Contains(table.String(), "fencing PAUSED cluster-wide") || !strings.Contains(table.String(), "dry-run") {
		t.Errorf("no pause or dry-run line:\n%s", table.String())
	}
	if !strings.Contains(table.String(), "gossip ring 2 alive, 1 dead, 0 left") {
		t.Errorf("no ring summary:\n%s", table.String())
	}

	var wide bytes.Buffer
	if err := printer.Print(&wide, "wide", s.Doc(t0)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(wide.String(), "BOOT-ID") || !strings.Contains(wide.String(), "ipmi://bmc-fenced:623") ||
		!strings.Contains(wide.String(), "lost power") {
		t.Errorf("wide:\n%s", wide.String())
	}

	var js bytes.Buffer
	if err := printer.Print(&js, "json", s.Doc(t0)); err != nil {
		t.Fatal(err)
	}
	var back Status
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("json: %v\n%s", err, js.String())
	}
	if len(back.Nodes) != 4 || back.Nodes[0].Name != "fenced" || back.Nodes[0].Evidence == nil ||
		back.Nodes[0].Evidence.Method != vocab.EvidenceBMCPowerOff || back.Nodes[0].Taint != TaintFenced ||
		back.Nodes[3].PowerErrorKind != "timeout" || back.Nodes[2].Excluded != taint.ExcludeLabel || back.Nodes[0].Excluded != "" || back.Nodes[3].Power != "unknown" ||
		back.Agent == nil || back.Agent.Members["alive"] != 2 || back.Nodes[0].Phase != "Fenced" || back.Nodes[0].Gossip != back.Nodes[0].Phase {
		t.Fatalf("json:\n%s", js.String())
	}
	// Every column printed is in the help, under the name printed.
	help := StatusColumnsHelp()
	for _, col := range strings.Fields(strings.SplitN(wide.String(), "\n", 2)[0]) {
		if !strings.Contains(help, "  "+col+" ") {
			t.Errorf("column %s is not in the help:\n%s", col, help)
		}
	}
	var yml bytes.Buffer
	if err := printer.Print(&yml, "yaml", s.Doc(t0)); err != nil || !strings.Contains(yml.String(), "taint: other") {
		t.Fatalf("yaml (%v):\n%s", err, yml.String())
	}
}

// TestStatusReturning: a node whose out-of-service taint fenced took off
// and whose returning taint is still on says so in the TAINT column.
func TestStatusReturning(t *testing.T) {
	e := newEnv(nil, returningNode(false))
	s, err := e.op.Status(context.Background(), StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Nodes) != 1 || s.Nodes[0].Taint != TaintReturning {
		t.Fatalf("nodes %+v", s.Nodes)
	}
	var table bytes.Buffer
	if err := printer.Print(&table, "", s.Doc(t0)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), " returning ") {
		t.Errorf("table:\n%s", table.String())
	}
}

// TestStatusNewerEvidence: a node fenced by a newer fenced shows its
// evidence's format, in the table and in JSON.
func TestStatusNewerEvidence(t *testing.T) {
	e := newEnv(nil, newNode("n1", corev1.ConditionUnknown, fencedByNewer))
	s, err := e.op.Status(context.Background(), StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var table, js bytes.Buffer
	if err := printer.Print(&table, "", s.Doc(t0)); err != nil {
		t.Fatal(err)
	}
	if err := printer.Print(&js, "json", s.Doc(t0)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "format 2 (newer fenced)") || !strings.Contains(js.String(), `"newerEvidenceFormat": 2`) {
		t.Errorf("table:\n%s\njson:\n%s", table.String(), js.String())
	}
}

func TestStatusWithoutInventoryOrAgent(t *testing.T) {
	e := newEnv(nil, newNode("n1", corev1.ConditionTrue))
	s, err := e.op.Status(context.Background(), StatusOptions{AgentURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printer.Print(&out, "", s.Doc(t0)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(strings.Split(out.String(), "\n")[1]); strings.Join(got, " ") != "n1 True 60m - - - - - - -" {
		t.Errorf("row = %q", got)
	}
	if !strings.Contains(out.String(), "agent: reading agent metrics") {
		t.Errorf("agent error not shown:\n%s", out.String())
	}
}

// topologyInventory is a fakeInventory whose nodes also have a PDU level
// (fencing topology): level 1 the BMC, level 2 the outlets in pdus.
type topologyInventory struct {
	fakeInventory
	pdus map[string][]*fakeBMC
}

func (i topologyInventory) Levels(node string) [][]device.Plug {
	levels := [][]device.Plug{{{Device: vocab.DeviceBMC, Driver: i.fakeInventory[node], Endpoint: "ipmi://bmc-" + node + ":623"}}}
	var pdu []device.Plug
	for n, b := range i.pdus[node] {
		pdu = append(pdu, device.Plug{Device: fmt.Sprintf("pdu-%d", n), Plug: "3", Driver: b, Endpoint: "fence_apc_snmp://pdu/3"})
	}
	return append(levels, pdu)
}

// TestConfirmReadsTheOtherLevels: with the BMC dark, an outlet that still
// feeds the node is a reading of on — refused; both outlets off — the
// operator's confirmation goes on.
func TestConfirmReadsTheOtherLevels(t *testing.T) {
	for _, c := range []struct {
		name    string
		outlets []vocab.PowerState
		refused string
	}{
		{"one outlet still on", []vocab.PowerState{vocab.PowerOff, vocab.PowerOn}, "fencing level 2 reads node n1's power ON"},
		{"both outlets off", []vocab.PowerState{vocab.PowerOff, vocab.PowerOff}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			bmc := &fakeBMC{err: timeoutErr("n1")}
			inv := topologyInventory{fakeInventory{"n1": bmc}, map[string][]*fakeBMC{"n1": {{state: c.outlets[0]}, {state: c.outlets[1]}}}}
			e := newEnv(inv, newNode("n1", corev1.ConditionUnknown))
			err := e.op.Confirm(context.Background(), ConfirmOptions{Node: "n1", Consent: Consent{Yes: true}, Reason: "r"})
			if c.refused != "" {
				if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.refused) || e.writes() != 0 {
					t.Fatalf("err = %v, writes %d; want a refusal %q and nothing written", err, e.writes(), c.refused)
				}
				return
			}
			if err != nil || !taint.HasTaint(e.node(t, "n1")) {
				t.Fatalf("err = %v, taint %v; want the manual taint", err, taint.HasTaint(e.node(t, "n1")))
			}
			if !strings.Contains(e.out.String(), "level 2:     pdu-0:3 off, pdu-1:3 off") {
				t.Errorf("output does not show the level:\n%s", e.out)
			}
		})
	}
}
