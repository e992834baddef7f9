package diagnose

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

var now = time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)

// The world of the seeds: a Deployment "logger" in namespace "app" with a
// ReadWriteOnce claim, its volume attached to w-1, its new pod on w-2.
const (
	ns     = "app"
	pvName = "pvc-40b33f89-d2f2-423a-a774-293b9a96cfec"
	claim  = "logger-data"
)

var yes, no = ptr(true), ptr(false)

func ptr[T any](v T) *T { return &v }

func before(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

type world struct{ s Snapshot }

func newWorld() *world {
	w1, w2 := testNode("w-1", corev1.ConditionTrue), testNode("w-2", corev1.ConditionTrue)
	for _, n := range []*corev1.Node{w1, w2} {
		n.Status.Conditions[0].LastTransitionTime = before(2 * time.Hour)
		n.Status.Conditions[0].Reason = "KubeletReady"
	}
	pv := testPV(pvName)
	pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	c := testClaim(ns, claim, pvName)
	c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	c.Status.Phase = corev1.ClaimBound
	va := testVA("w-1", pvName)
	va.Name = "csi-9f7704015b456f146ce8c6c3bd80a5ec6cc55f4f5bfb90c61c250d0b050a283c"
	va.CreationTimestamp = before(66 * time.Minute)
	va.Status.Attached = true
	newPod := owned(testPod(ns, "logger-7d9c-new12", "w-2", corev1.PodPending, claim), "ReplicaSet", "logger-7d9c")
	newPod.CreationTimestamp = before(5 * time.Minute)
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: "logger-7d9c-new12.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: newPod.Name},
		Reason:         string(vocab.EventFailedAttachVolume), Type: corev1.EventTypeWarning, Count: 5,
		FirstTimestamp: before(4 * time.Minute), LastTimestamp: before(30 * time.Second),
		Message: `Multi-Attach error for volume "` + pvName + `" Volume is already exclusively attached to one node and can't be attached to another`,
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "logger"}}
	d.Spec.Template.Spec.Volumes = newPod.Spec.Volumes
	return &world{Snapshot{
		Nodes: []*corev1.Node{w1, w2}, PVs: []*corev1.PersistentVolume{pv}, PVCs: []*corev1.PersistentVolumeClaim{c},
		VolumeAttachments: []*storagev1.VolumeAttachment{va}, Pods: []*corev1.Pod{newPod}, Events: []*corev1.Event{ev},
		Deployments: []*appsv1.Deployment{d},
		ReplicaSets: []*appsv1.ReplicaSet{
			owned(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "logger-7d9c"}}, "Deployment", "logger"),
			owned(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "logger-5f6b"}}, "Deployment", "logger"),
		},
		Fencing: map[string]NodeFencing{}, Now: now,
	}}
}

func owned[T metav1.Object](o T, kind, name string) T {
	o.SetOwnerReferences([]metav1.OwnerReference{{Kind: kind, Name: name, Controller: ptr(true), APIVersion: "apps/v1"}})
	return o
}

func (w *world) node(name string) *corev1.Node {
	for _, n := range w.s.Nodes {
		if n.Name == name {
			return n
		}
	}
	panic(name)
}

func (w *world) oldPod(mods ...func(*corev1.Pod)) *corev1.Pod {
	p := owned(testPod(ns, "logger-5f6b-old34", "w-1", corev1.PodRunning, claim), "ReplicaSet", "logger-5f6b")
	p.CreationTimestamp = before(3 * time.Hour)
	for _, m := range mods {
		m(p)
	}
	w.s.Pods = append(w.s.Pods, p)
	return p
}

func (w *world) inUse(node string) {
	n := w.node(node)
	n.Status.VolumesInUse = append(n.Status.VolumesInUse, corev1.UniqueVolumeName(UniqueVolumeName(w.s.PVs[0])))
}

func dead(n *corev1.Node) {
	n.Status.Conditions[0].Status = corev1.ConditionUnknown
	n.Status.Conditions[0].Reason = "NodeStatusUnknown"
	n.Status.Conditions[0].LastTransitionTime = before(4 * time.Minute)
}

func TestDiagnoseCauses(t *testing.T) {
	cases := []struct {
		name       string
		setup      func(w *world)
		opts       Options
		cause      Cause
		action     FixAction
		automatic  bool
		refusals   []RefusalReason
		command    string   // in Fix.Command
		fenced     string   // in Finding.Fenced
		proof      []string // each in some Fact's Says or Object
		noFindings bool
	}{
		{name: "seed 000: stale attachment on a live node", setup: func(w *world) {},
			cause: CauseStaleAttachment, action: FixDeleteAttachment, automatic: true,
			command: "kubectl delete volumeattachment csi-9f7704015b456f146ce8c6c3bd80a5ec6cc55f4f5bfb90c61c250d0b050a283c",
			proof:   []string{"FailedAttachVolume x5", "Ready=True for 120m", "does not list the volume", "attached=true", "ReadWriteOnce"}},
		{name: "stale, but the kubelet still lists the volume in volumesInUse", setup: func(w *world) { w.inUse("w-1") },
			cause: CauseStaleAttachment, action: FixDeleteAttachment, automatic: true, refusals: []RefusalReason{RefuseVolumeInUse},
			proof: []string{"status.volumesInUse lists the volume"}},
		{name: "stale, a pod on the holding node has an unknown claim", setup: func(w *world) {
			w.s.Pods = append(w.s.Pods, testPod("other", "x", "w-1", corev1.PodRunning, "missing"))
		}, cause: CauseStaleAttachment, action: FixDeleteAttachment, automatic: true, refusals: []RefusalReason{RefuseClaimUnknown}},
		{name: "seed 001: rolling update with an RWO claim", setup: func(w *world) { w.oldPod(); w.inUse("w-1") },
			cause: CauseRollingUpdate, action: FixPatchWorkload,
			command: `kubectl -n app patch deployment logger -p '{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null}}}'`,
			proof:   []string{"strategy RollingUpdate (the default)", "Running on node w-1"}},
		{name: "Recreate: the old pod still runs", setup: func(w *world) {
			w.oldPod()
			w.s.Deployments[0].Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
		}, cause: CauseVolumeInUse, action: FixWait, command: "rollout status deployment logger"},
		{name: "old pod terminating on the live node", setup: func(w *world) {
			w.oldPod(func(p *corev1.Pod) { p.DeletionTimestamp = ptr(before(time.Minute)) })
		}, cause: CauseVolumeInUse, action: FixWait, proof: []string{"Terminating on node w-1"}},
		{name: "another workload shares the claim", setup: func(w *world) {
			w.s.Pods = append(w.s.Pods, owned(testPod(ns, "backup-0", "w-1", corev1.PodRunning, claim), "StatefulSet", "backup"))
		}, cause: CauseSharedClaim, action: FixManual, proof: []string{"owned by StatefulSet/backup"}},
		{name: "ReadWriteOncePod held by another pod", setup: func(w *world) {
			w.s.PVCs[0].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
			w.s.PVs[0].Spec.AccessModes = w.s.PVCs[0].Spec.AccessModes
			w.s.Events, w.s.VolumeAttachments = nil, nil
			w.s.Pods[0].Spec.NodeName = "" // the scheduler keeps it out
			w.oldPod()
		}, cause: CauseReadWriteOncePod, action: FixManual, proof: []string{"not scheduled", "ReadWriteOncePod"}},
		{name: "seed 000 on 1.34: detach stuck, the driver reports a detach error", setup: func(w *world) {
			w.s.VolumeAttachments[0].DeletionTimestamp = ptr(before(5 * time.Minute))
			w.s.VolumeAttachments[0].Status.DetachError = &storagev1.VolumeError{Message: "rpc error: code = Internal desc = nexus busy"}
		}, cause: CauseStaleAttachment, action: FixReleaseAttachment, automatic: true,
			command: `kubectl patch volumeattachment csi-9f77`, proof: []string{"being deleted", "detach error: rpc error"}},
		{name: "detach stuck without an error", setup: func(w *world) {
			w.s.VolumeAttachments[0].DeletionTimestamp = ptr(before(5 * time.Minute))
		}, cause: CauseStaleAttachment, action: FixReleaseAttachment, automatic: true, proof: []string{"being deleted"}},
		{name: "detach pending while the kubelet still lists the volume", setup: func(w *world) {
			w.s.VolumeAttachments[0].DeletionTimestamp = ptr(before(5 * time.Minute))
			w.inUse("w-1")
		}, cause: CauseStaleAttachment, action: FixReleaseAttachment, automatic: true, refusals: []RefusalReason{RefuseVolumeInUse}},
		{name: "attach error on the pod's own node, no event", setup: func(w *world) {
			w.s.Events = nil
			w.s.VolumeAttachments[0].Spec.NodeName = "w-2"
			w.s.VolumeAttachments[0].Status.Attached = false
			w.s.VolumeAttachments[0].Status.AttachError = &storagev1.VolumeError{Message: "volume not found"}
		}, cause: CauseAttachError, action: FixManual},
		{name: "attachment of a deleted node", setup: func(w *world) { w.s.Nodes = w.s.Nodes[1:] },
			cause: CauseDeletedNode, action: FixDeleteAttachment, automatic: true, proof: []string{"not found"}},
		{name: "seed 002: dead node fenced cannot read", setup: func(w *world) {
			dead(w.node("w-1"))
			w.oldPod()
			w.s.Fencing["w-1"] = NodeFencing{LastEvent: &NodeEvent{Type: "Warning", Reason: string(vocab.EventCannotConfirmPowerState),
				Message: "BMC unreachable", Time: now.Add(-4 * time.Minute)}, Configured: yes, Fenceable: no, FenceableSays: "CannotBeFencedAutomatically 10m ago"}
		}, cause: CauseDeadNode, action: FixConfirmNode, automatic: true, command: "fenced confirm w-1 --reason",
			fenced: "fenced: CannotConfirmPowerState 4m ago: BMC unreachable; no working fence device", proof: []string{"Ready=Unknown for 4m (NodeStatusUnknown)"}},
		{name: "dead node, no fencing configured", setup: func(w *world) {
			dead(w.node("w-1"))
			w.s.Fencing["w-1"] = NodeFencing{Configured: no}
		}, cause: CauseDeadNode, action: FixConfirmNode, automatic: true, fenced: "no Event from fenced about this node (is the fencer running?); no fencing configured"},
		{name: "dead node fenced has tainted", setup: func(w *world) {
			dead(w.node("w-1"))
			w.s.Fencing["w-1"] = NodeFencing{Tainted: true, ByFenced: true, Evidence: &core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "fencer-1",
				At: now.Add(-2 * time.Minute), BMC: &core.Reading{Power: vocab.PowerOff, At: now.Add(-2 * time.Minute), Endpoint: "ipmi://10.0.0.11:623"}}}
		}, cause: CauseDeadNode, action: FixWait, fenced: "tainted out-of-service by fenced"},
		{name: "dead node tainted by someone else", setup: func(w *world) {
			dead(w.node("w-1"))
			w.s.Fencing["w-1"] = NodeFencing{Tainted: true}
		}, cause: CauseDeadNode, action: FixWait, fenced: "by someone else"},
		{name: "no attachment elsewhere any more, only the event", setup: func(w *world) { w.s.VolumeAttachments = nil },
			cause: CauseUnknown, action: FixWait},
		{name: "no event, but the attachment is on another node", setup: func(w *world) { w.s.Events = nil },
			cause: CauseStaleAttachment, action: FixDeleteAttachment, automatic: true},
		{name: "pod running since: the event is history", setup: func(w *world) {
			w.s.Pods[0].Status.Phase = corev1.PodRunning
		}, noFindings: true},
		{name: "ReadWriteMany is never stuck", setup: func(w *world) {
			w.s.Events = nil
			w.s.PVCs[0].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
			w.s.PVs[0].Spec.AccessModes = w.s.PVCs[0].Spec.AccessModes
		}, noFindings: true},
		{name: "scoped to another namespace", setup: func(w *world) {}, opts: Options{Namespace: "other"}, noFindings: true},
		{name: "scoped to another pod", setup: func(w *world) {}, opts: Options{Namespace: ns, Pod: "web-0"}, noFindings: true},
		{name: "scoped to the pod", setup: func(w *world) {}, opts: Options{Namespace: ns, Pod: "logger-7d9c-new12"}, cause: CauseStaleAttachment, action: FixDeleteAttachment, automatic: true},
		{name: "scoped to the claim", setup: func(w *world) {}, opts: Options{Namespace: ns, Claim: claim}, cause: CauseStaleAttachment, action: FixDeleteAttachment, automatic: true},
		{name: "scoped to another claim", setup: func(w *world) {}, opts: Options{Namespace: ns, Claim: "x"}, noFindings: true},
		{name: "scoped to the holding node", setup: func(w *world) {}, opts: Options{Node: "w-1"}, cause: CauseStaleAttachment, action: FixDeleteAttachment, automatic: true},
		{name: "scoped to a third node", setup: func(w *world) {}, opts: Options{Node: "w-3"}, noFindings: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			tc.setup(w)
			r := Diagnose(w.s, tc.opts)
			if tc.noFindings {
				if r.Stuck() {
					t.Fatalf("findings = %+v, want none", r.Findings)
				}
				return
			}
			if len(r.Findings) != 1 {
				t.Fatalf("findings = %+v, want one", r.Findings)
			}
			f := r.Findings[0]
			if f.Cause != tc.cause || f.Fix.Action != tc.action || f.Fix.Automatic != tc.automatic {
				t.Fatalf("cause %s, fix %s automatic %v; want %s, %s, %v\n%+v", f.Cause, f.Fix.Action, f.Fix.Automatic, tc.cause, tc.action, tc.automatic, f)
			}
			var got []RefusalReason
			for _, rf := range f.Fix.Refusals {
				got = append(got, rf.Reason)
			}
			if strings.Join(toStrings(got), ",") != strings.Join(toStrings(tc.refusals), ",") {
				t.Errorf("refusals = %v, want %v", f.Fix.Refusals, tc.refusals)
			}
			if f.Pod != ns+"/logger-7d9c-new12" || f.Volume != pvName || f.Summary == "" || !f.Since.Before(now) {
				t.Errorf("finding = %+v", f)
			}
			if !strings.Contains(f.Fix.Command, tc.command) {
				t.Errorf("command = %q, want it to contain %q", f.Fix.Command, tc.command)
			}
			if !strings.Contains(f.Fenced, tc.fenced) || (tc.fenced == "" && f.Fenced != "") {
				t.Errorf("fenced = %q, want %q", f.Fenced, tc.fenced)
			}
			for _, want := range tc.proof {
				found := false
				for _, p := range f.Proof {
					found = found || strings.Contains(p.Says, want) || strings.Contains(p.Object, want)
				}
				if !found {
					t.Errorf("no proof says %q: %+v", want, f.Proof)
				}
			}
		})
	}
}

func toStrings[T ~string](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

func TestDiagnoseSinceIsTheFirstEvent(t *testing.T) {
	r := Diagnose(newWorld().s, Options{})
	if len(r.Findings) != 1 || !r.Findings[0].Since.Equal(now.Add(-4*time.Minute)) {
		t.Fatalf("findings = %+v", r.Findings)
	}
	w := newWorld()
	w.s.Events = nil
	if r := Diagnose(w.s, Options{}); !r.Findings[0].Since.Equal(now.Add(-5 * time.Minute)) {
		t.Fatalf("since = %v, want the pod's creation", r.Findings[0].Since)
	}
}

func TestDiagnoseRisks(t *testing.T) {
	sts := func(w *world, node string) {
		p := owned(testPod(ns, "db-0", node, corev1.PodRunning, claim), "StatefulSet", "db")
		w.s.Pods = append(w.s.Pods, p)
	}
	cases := []struct {
		name   string
		setup  func(w *world)
		opts   Options
		kinds  []RiskKind
		object string
	}{
		{"deployment with RWO claim and RollingUpdate", func(w *world) {}, Options{Risks: true},
			[]RiskKind{RiskRollingUpdateRWO}, "deployment/app/logger"},
		{"without --all no risks", func(w *world) {}, Options{}, nil, ""},
		{"Recreate is no risk", func(w *world) { w.s.Deployments[0].Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType }, Options{Risks: true}, nil, ""},
		{"ReadWriteMany is no risk", func(w *world) {
			w.s.PVCs[0].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
			w.s.PVs[0].Spec.AccessModes = w.s.PVCs[0].Spec.AccessModes
		}, Options{Risks: true}, nil, ""},
		{"StatefulSet pod on a node with no fencing", func(w *world) {
			w.s.Deployments = nil
			sts(w, "w-1")
			w.s.Fencing["w-1"] = NodeFencing{Configured: no}
		}, Options{Risks: true}, []RiskKind{RiskUnfenceable}, "pod/app/db-0"},
		{"StatefulSet pod on a node whose devices do not answer", func(w *world) {
			w.s.Deployments = nil
			sts(w, "w-1")
			w.s.Fencing["w-1"] = NodeFencing{Configured: yes, Fenceable: no, FenceableSays: "CannotBeFencedAutomatically"}
		}, Options{Risks: true}, []RiskKind{RiskUnfenceable}, "pod/app/db-0"},
		{"StatefulSet pod on a fenceable node", func(w *world) {
			w.s.Deployments = nil
			sts(w, "w-1")
			w.s.Fencing["w-1"] = NodeFencing{Configured: yes, Fenceable: yes}
		}, Options{Risks: true}, nil, ""},
		{"StatefulSet pod, fencing unknown", func(w *world) { w.s.Deployments = nil; sts(w, "w-1") }, Options{Risks: true}, nil, ""},
		{"node without graceful shutdown", func(w *world) {
			w.s.Deployments = nil
			w.s.Fencing["w-2"] = NodeFencing{GracefulShutdown: no}
		}, Options{Risks: true}, []RiskKind{RiskNoGracefulShutdown}, "node/w-2"},
		{"node with graceful shutdown", func(w *world) {
			w.s.Deployments = nil
			w.s.Fencing["w-2"] = NodeFencing{GracefulShutdown: yes}
		}, Options{Risks: true}, nil, ""},
		{"scoped to another namespace", func(w *world) {}, Options{Risks: true, Namespace: "other"}, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			tc.setup(w)
			r := Diagnose(w.s, tc.opts)
			var kinds []RiskKind
			for _, rk := range r.Risks {
				kinds = append(kinds, rk.Kind)
			}
			if strings.Join(toStrings(kinds), ",") != strings.Join(toStrings(tc.kinds), ",") {
				t.Fatalf("risks = %+v, want kinds %v", r.Risks, tc.kinds)
			}
			if len(r.Risks) > 0 && (r.Risks[0].Object != tc.object || r.Risks[0].Says == "" || r.Risks[0].Fix.Command == "") {
				t.Errorf("risk = %+v, want object %s", r.Risks[0], tc.object)
			}
		})
	}
}

// TestMultiAttachInEveryVersionsWords: the attach/detach controller's
// Event says "Multi-Attach error" until Kubernetes v1.36 and "Waiting for
// detach" since v1.37 (the messages below are theirs, verbatim); the
// event recorder prefixes an aggregated one. Each is found, with its
// volume, and the same diagnosis follows.
func TestMultiAttachInEveryVersionsWords(t *testing.T) {
	for _, tc := range []struct {
		name, message string
		want          bool
	}{
		{"v1.34 exclusively attached", `Multi-Attach error for volume "` + pvName + `" Volume is already exclusively attached to one node and can't be attached to another`, true},
		{"v1.34 used by pods", `Multi-Attach error for volume "` + pvName + `" Volume is already used by pod(s) app-0`, true},
		{"v1.37 exclusively attached", `Waiting for detach for volume "` + pvName + `" Volume is already exclusively attached to one node, waiting on detach before it can be attached to another node`, true},
		{"v1.37 used by pods", `Waiting for detach for volume "` + pvName + `" Volume is already used by pod(s) app-0`, true},
		{"aggregated", `(combined from similar events): Waiting for detach for volume "` + pvName + `" Volume is already exclusively attached to one node, waiting on detach before it can be attached to another node`, true},
		{"another attach failure", `AttachVolume.Attach failed for volume "` + pvName + `" : rpc error: code = DeadlineExceeded`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pv, ok := MultiAttachVolume(tc.message)
			if ok != tc.want || ok && pv != pvName {
				t.Fatalf("MultiAttachVolume = %q, %v; want %q, %v", pv, ok, pvName, tc.want)
			}
			w := newWorld()
			w.s.Events[0].Message = tc.message
			r := Diagnose(w.s, Options{})
			fromEvent := len(r.Findings) == 1 && r.Findings[0].Since.Equal(now.Add(-4*time.Minute))
			if fromEvent != tc.want {
				t.Fatalf("findings %+v: from the Event %v, want %v", r.Findings, fromEvent, tc.want)
			}
		})
	}
}
