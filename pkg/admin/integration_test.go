package admin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/tools/clientcmd"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/pkg/diagnose"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestDiagnoseFixIntegration runs `fenced diagnose --fix` against a real
// API server: the refusals of the stale-attachment rule (the volume in volumesInUse, a pod
// on the holding node using it, the VolumeAttachment changed between the
// check and the delete, no terminal and no --yes, a dead node whose BMC
// reads on) change nothing, and a safe cure deletes and records who did.
//
// The controller manager runs without the node lifecycle and attach/detach
// controllers: there is no kubelet, and the test alone decides what the
// Nodes and VolumeAttachments say.
func TestDiagnoseFixIntegration(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true,
		Controllers: []string{"serviceaccount-controller", "serviceaccount-token-controller", "namespace-controller"}})
	if _, err := c.CreateNamespace(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	kc, err := c.UserKubeconfig("jane", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	jane, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	admin := c.Client()
	// touch changes the VolumeAttachment between the last check and the
	// delete (or release): the precondition must refuse.
	touch := func(t *testing.T, _ *scenario, va string) {
		fresh, err := admin.StorageV1().VolumeAttachments().Get(ctx, va, metav1.GetOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		fresh.Annotations = map[string]string{"example.com/touched": "yes"}
		if _, err := admin.StorageV1().VolumeAttachments().Update(ctx, fresh, metav1.UpdateOptions{}); err != nil {
			t.Error(err)
		}
	}

	cases := []struct {
		name string
		// setup changes the scenario before diagnose runs.
		setup func(t *testing.T, s *scenario)
		// answer, when set, is run while the y/N question is open, then
		// answers y on a terminal.
		answer func(t *testing.T, s *scenario)
		// hook runs between the last check and the delete.
		hook    func(t *testing.T, s *scenario, va string)
		inv     Inventory
		opts    DiagnoseOptions
		wantErr error
		deleted bool
		out     string
	}{
		{name: "volume in volumesInUse", setup: func(t *testing.T, s *scenario) { s.setInUse(t) },
			opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, wantErr: ErrStuck, out: "lists kubernetes.io/csi/csi.fenced.test^vol-inuse in status.volumesInUse"},
		{name: "volume in volumesInUse while asking", answer: func(t *testing.T, s *scenario) { s.setInUse(t) },
			wantErr: ErrRefused, out: "status.volumesInUse"},
		{name: "pod on the holding node uses it", setup: func(t *testing.T, s *scenario) { s.podOnHold(t) },
			opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, wantErr: ErrStuck, out: "shared-claim"},
		{name: "pod on the holding node while asking", answer: func(t *testing.T, s *scenario) { s.podOnHold(t) },
			wantErr: ErrRefused, out: "on node podrace-hold uses volume pv-podrace"},
		{name: "changed between check and delete", hook: touch, opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, wantErr: ErrRefused, out: "changed since it was checked"},
		{name: "no terminal and no yes", opts: DiagnoseOptions{Fix: true, Consent: Consent{In: strings.NewReader("y\n")}}, wantErr: ErrRefused, out: "Nothing changed."},
		{name: "dead node whose BMC reads on", setup: func(t *testing.T, s *scenario) { s.setReady(t, corev1.ConditionUnknown) },
			inv:  fakeInventory{"deadon-hold": {state: vocab.PowerOn, guid: nodeUUID}},
			opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, wantErr: ErrRefused, out: "power ON"},
		{name: "safe", opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, deleted: true, out: "Deleted volumeattachment va-safe"},
		{name: "safe after asking", answer: func(*testing.T, *scenario) {}, deleted: true},
		{name: "node deleted", setup: func(t *testing.T, s *scenario) {
			if err := admin.CoreV1().Nodes().Delete(ctx, s.hold, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, deleted: true, out: "deleted-node"},
		{name: "stuck in deletion: released", setup: func(t *testing.T, s *scenario) { s.stuckInDeletion(t) },
			opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, deleted: true, out: "Removed the finalizers of volumeattachment va-release"},
		{name: "stuck in deletion, changed before the release", setup: func(t *testing.T, s *scenario) { s.stuckInDeletion(t) },
			hook: touch, opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, wantErr: ErrRefused, out: "changed since it was checked"},
		{name: "stuck in deletion, volume in volumesInUse", setup: func(t *testing.T, s *scenario) { s.stuckInDeletion(t); s.setInUse(t) },
			opts: DiagnoseOptions{Fix: true, Consent: Consent{Yes: true}}, wantErr: ErrStuck, out: "will NOT release-volumeattachment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(ctx, t, admin, shortKey(tc.name))
			if tc.setup != nil {
				tc.setup(t, s)
			}
			rec, stop := taint.NewRecorder(jane, "fenced-diagnose")
			out := &syncBuf{}
			op := &Operator{Client: jane, Recorder: rec, Out: out, Inventory: tc.inv,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if tc.hook != nil {
				op.Client = beforeWrite{jane, func(va string) { tc.hook(t, s, va) }}
			}
			opts := tc.opts
			opts.Scope = diagnose.Options{Node: s.hold}
			if tc.answer != nil {
				opts.Fix, opts.Terminal = true, true
				opts.In = &answerer{do: func() { tc.answer(t, s) }}
			}
			_, err := op.Diagnose(ctx, opts)
			stop()
			if (tc.wantErr == nil) != (err == nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("err = %v, want %v\n%s", err, tc.wantErr, out)
			}
			if !strings.Contains(out.String(), tc.out) {
				t.Errorf("output lacks %q:\n%s", tc.out, out)
			}
			_, gerr := admin.StorageV1().VolumeAttachments().Get(ctx, s.va, metav1.GetOptions{})
			if gone := apierrors.IsNotFound(gerr); gone != tc.deleted {
				t.Fatalf("volumeattachment %s deleted = %v (%v), want %v\n%s", s.va, gone, gerr, tc.deleted, out)
			}
			evs := vaEvents(ctx, t, admin, s.va)
			switch {
			case tc.deleted && (len(evs) != 1 || !(strings.HasPrefix(evs[0].Message, "jane deleted VolumeAttachment "+s.va) ||
				strings.HasPrefix(evs[0].Message, "jane removed the finalizers")) || evs[0].Source.Component != "fenced-diagnose"):
				t.Errorf("events on the VolumeAttachment = %+v, want one naming jane", evs)
			case !tc.deleted && len(evs) != 0:
				t.Errorf("events on a VolumeAttachment that was not deleted: %+v", evs)
			}
			if n, err := admin.CoreV1().Nodes().Get(ctx, s.hold, metav1.GetOptions{}); err == nil && taint.HasTaint(n) {
				t.Errorf("node %s tainted", s.hold)
			}
		})
	}
}

func shortKey(name string) string {
	switch name {
	case "volume in volumesInUse":
		return "inuse"
	case "volume in volumesInUse while asking":
		return "inuserace"
	case "pod on the holding node uses it":
		return "pod"
	case "pod on the holding node while asking":
		return "podrace"
	case "changed between check and delete":
		return "changed"
	case "no terminal and no yes":
		return "noterm"
	case "dead node whose BMC reads on":
		return "deadon"
	case "safe after asking":
		return "safeask"
	case "node deleted":
		return "nodedel"
	case "stuck in deletion: released":
		return "release"
	case "stuck in deletion, changed before the release":
		return "relchanged"
	case "stuck in deletion, volume in volumesInUse":
		return "relinuse"
	}
	return name
}

// scenario is seed 000 on a real API server: the volume pv-KEY, claimed by
// shop/data-KEY, attached to node KEY-hold (Ready, nothing uses it), wanted
// by pod shop/app-KEY on node KEY-want.
type scenario struct {
	ctx             context.Context
	client          kubernetes.Interface
	key, hold, want string
	pv, claim, va   string
	driver, handle  string
}

func newScenario(ctx context.Context, t *testing.T, client kubernetes.Interface, key string) *scenario {
	t.Helper()
	s := &scenario{ctx: ctx, client: client, key: key, hold: key + "-hold", want: key + "-want", pv: "pv-" + key,
		claim: "data-" + key, va: "va-" + key, driver: "csi.fenced.test", handle: "vol-" + key}
	for _, n := range []string{s.hold, s.want} {
		node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Status.NodeInfo = corev1.NodeSystemInfo{BootID: bootA, SystemUUID: nodeUUID}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: s.pv},
		Spec: corev1.PersistentVolumeSpec{AccessModes: rwo, Capacity: size,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: s.driver, VolumeHandle: s.handle}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	empty := ""
	if _, err := client.CoreV1().PersistentVolumeClaims("shop").Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: s.claim},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: rwo, VolumeName: s.pv, StorageClassName: &empty,
			Resources: corev1.VolumeResourceRequirements{Requests: size}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pv := s.pv
	va, err := client.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: s.va},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: s.driver, NodeName: s.hold, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	va.Status.Attached = true
	if _, err := client.StorageV1().VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.createPod(t, "app-"+key, s.want)
	return s
}

func (s *scenario) createPod(t *testing.T, name, node string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1",
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: s.claim}}}}}}
	if _, err := s.client.CoreV1().Pods("shop").Create(s.ctx, p, metav1.CreateOptions{}); err != nil {
		t.Error(err)
	}
}

// setInUse makes the holding node's kubelet list the volume as mounted.
func (s *scenario) setInUse(t *testing.T) {
	t.Helper()
	n, err := s.client.CoreV1().Nodes().Get(s.ctx, s.hold, metav1.GetOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	n.Status.VolumesInUse = []corev1.UniqueVolumeName{corev1.UniqueVolumeName("kubernetes.io/csi/" + s.driver + "^" + s.handle)}
	if _, err := s.client.CoreV1().Nodes().UpdateStatus(s.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Error(err)
	}
}

func (s *scenario) setReady(t *testing.T, status corev1.ConditionStatus) {
	t.Helper()
	n, err := s.client.CoreV1().Nodes().Get(s.ctx, s.hold, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions[0].Status, n.Status.Conditions[0].Reason = status, "NodeStatusUnknown"
	if _, err := s.client.CoreV1().Nodes().UpdateStatus(s.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// stuckInDeletion makes the VolumeAttachment what the attach/detach
// controller leaves when a CSI driver cannot detach: deleted (it has a
// deletionTimestamp), kept by the attacher's finalizer, with a detachError.
func (s *scenario) stuckInDeletion(t *testing.T) {
	t.Helper()
	va, err := s.client.StorageV1().VolumeAttachments().Get(s.ctx, s.va, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	va.Finalizers = []string{"external-attacher/" + s.driver}
	if va, err = s.client.StorageV1().VolumeAttachments().Update(s.ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	va.Status.DetachError = &storagev1.VolumeError{Message: "rpc error: code = Internal desc = backend busy", Time: metav1.Now()}
	if _, err := s.client.StorageV1().VolumeAttachments().UpdateStatus(s.ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.client.StorageV1().VolumeAttachments().Delete(s.ctx, s.va, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever the case left, release it so the namespace can go.
		if va, err := s.client.StorageV1().VolumeAttachments().Get(context.Background(), s.va, metav1.GetOptions{}); err == nil {
			va.Finalizers = nil
			_, _ = s.client.StorageV1().VolumeAttachments().Update(context.Background(), va, metav1.UpdateOptions{})
		}
	})
}

// podOnHold starts a pod using the claim on the holding node.
func (s *scenario) podOnHold(t *testing.T) { t.Helper(); s.createPod(t, "other-"+s.key, s.hold) }

func vaEvents(ctx context.Context, t *testing.T, client kubernetes.Interface, va string) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "VolumeAttachment", "involvedObject.name": va}.AsSelector().String()
	list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Reason == string(vocab.EventStaleVolumeAttachmentDeleted) || e.Reason == string(vocab.EventStaleVolumeAttachmentReleased) {
			out = append(out, e)
		}
	}
	return out
}

// beforeWrite is a clientset that calls hook with the VolumeAttachment's
// name before it deletes or updates one: after the cure's last check, in
// the window its preconditions guard.
type beforeWrite struct {
	kubernetes.Interface
	hook func(va string)
}

func (b beforeWrite) StorageV1() storagev1client.StorageV1Interface {
	return beforeWriteStorage{b.Interface.StorageV1(), b.hook}
}

type beforeWriteStorage struct {
	storagev1client.StorageV1Interface
	hook func(va string)
}

func (b beforeWriteStorage) VolumeAttachments() storagev1client.VolumeAttachmentInterface {
	return beforeWriteVAs{b.StorageV1Interface.VolumeAttachments(), b.hook}
}

type beforeWriteVAs struct {
	storagev1client.VolumeAttachmentInterface
	hook func(va string)
}

func (b beforeWriteVAs) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	b.hook(name)
	return b.VolumeAttachmentInterface.Delete(ctx, name, opts)
}

func (b beforeWriteVAs) Update(ctx context.Context, va *storagev1.VolumeAttachment, opts metav1.UpdateOptions) (*storagev1.VolumeAttachment, error) {
	b.hook(va.Name)
	return b.VolumeAttachmentInterface.Update(ctx, va, opts)
}

// answerer is a terminal on which the world changes (do) while the
// question is open, and then the person answers y.
type answerer struct {
	once sync.Once
	do   func()
	done bool
}

func (a *answerer) Read(p []byte) (int, error) {
	a.once.Do(a.do)
	if a.done {
		return 0, io.EOF
	}
	a.done = true
	return copy(p, "y\n"), nil
}

// syncBuf is a bytes.Buffer safe for the recorder's goroutine and the test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestDiagnoseGracefulShutdownIntegration: on a real API server, agents'
// key Leases carrying what each found of its kubelet's graceful shutdown
// (written with pkg/identity/publish, as the agent writes them) make
// `fenced diagnose --all` list the node whose agent said "none", and only
// it.
func TestDiagnoseGracefulShutdownIntegration(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true, Controllers: []string{"namespace-controller"}})
	const ns = "fenced-system"
	admin := c.Client()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	for node, g := range map[string]vocab.GracefulShutdown{"gs-none": vocab.GracefulNone, "gs-lock": vocab.GracefulKubeletDelayLock,
		"gs-unknown": vocab.GracefulUnknown, "gs-silent": ""} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := publish.Publish(ctx, admin, ns, node, "boot-"+node, key.Public(), time.Now()); err != nil {
			t.Fatal(err)
		}
		if g != "" {
			if err := publish.PublishGracefulShutdown(ctx, admin, ns, node, g); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := &syncBuf{}
	op := &Operator{Client: admin, Out: out, LeaseNamespace: ns, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	r, err := op.Diagnose(ctx, DiagnoseOptions{Scope: diagnose.Options{Risks: true}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rk := range r.Risks {
		got = append(got, string(rk.Kind)+" "+rk.Object)
	}
	if want := []string{string(diagnose.RiskNoGracefulShutdown) + " node/gs-none"}; !slices.Equal(got, want) {
		t.Errorf("risks %q, want %q; output:\n%s", got, want, out)
	}
	if !strings.Contains(out.String(), "no kubelet shutdown delay lock") {
		t.Errorf("output lacks the reason:\n%s", out)
	}
}
