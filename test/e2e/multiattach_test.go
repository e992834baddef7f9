package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/pkg/diagnose"
)

// attachErrorMessage is what the test driver says when it fails to attach
// in the attach-error case, worded like a real driver's failed
// ControllerPublishVolume.
const attachErrorMessage = "rpc error: code = Internal desc = ControllerPublishVolume: storage backend unreachable (test driver)"

// TestMultiAttach reproduces every cause of a pod that cannot attach its
// volume on one harness, each in its own namespace and all at
// once: w-1 and w-2 stay up, w-3 dies, w-4 dies and its Node is deleted.
// Each case waits for the Event that shows the stuck pod (from the real
// attach/detach controller, or kube-scheduler for ReadWriteOncePod), runs
// `fenced diagnose` on it (text and JSON: the cause must be named), then
// `fenced diagnose --fix --yes`: where the cure is safe that is the cure;
// where it is not, it must refuse and change nothing, and the manual cure
// follows. Then the pod must run, and the volume must have had one writer
// at a time.
func TestMultiAttach(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{Machines: []string{"w-1", "w-2", "w-3", "w-4"}})
	start := time.Now()
	cases := []struct {
		name string
		// cause is what `fenced diagnose` must name.
		cause diagnose.Cause
		// fix is what `fenced diagnose --fix --yes` must do: cure it (exit
		// 0, and no manual cure follows) or refuse (exit 1, its output
		// says fixSays, nothing changes).
		fix     fixOutcome
		fixSays string
		// stuck sets the case up and returns the stuck pod; cure is the
		// manual cure, for the cases --fix refuses.
		stuck func(context.Context) (harness.Stuck, error)
		cure  func(context.Context, harness.Stuck) error
	}{{
		name:  "seed 000: stale VolumeAttachment on a live node",
		cause: diagnose.CauseStaleAttachment,
		// The attach/detach controller deleted the VolumeAttachment
		// already; the driver's finalizer holds it, so the runbook's
		// `kubectl delete volumeattachment` would change nothing: --fix
		// removes the finalizer after checking again.
		fix: fixCures, fixSays: "Removed the finalizers of volumeattachment",
		stuck: func(ctx context.Context) (harness.Stuck, error) { return h.StaleAttachment(ctx, "stale", "w-1", "w-2") },
	}, {
		name:  "seed 001: Deployment, RWO claim, RollingUpdate across nodes",
		cause: diagnose.CauseRollingUpdate,
		fix:   fixRefuses, fixSays: `fenced never changes a workload; to cure it, apply:`,
		stuck: func(ctx context.Context) (harness.Stuck, error) {
			s, _, err := h.RollingUpdateRWO(ctx, "rolling", "w-1", "w-2")
			return s, err
		},
		cure: func(ctx context.Context, s harness.Stuck) error {
			// The rollout is blocked: the old pod runs on.
			if _, err := h.WaitPodRunning(ctx, s.Namespace, s.Holder, s.HeldBy, time.Second); err != nil {
				return fmt.Errorf("the rollout did not wait for the new pod: %w", err)
			}
			return h.SetRecreate(ctx, s.Namespace, "logger")
		},
	}, {
		name:  "seeds 002/003: dead node, StatefulSet pod recreated elsewhere",
		cause: diagnose.CauseDeadNode,
		// The power is verified off (the scenario waited for the BMC to
		// read off): confirming it is what a person on site would do.
		fix: fixCures, fixSays: "with manual evidence",
		stuck: func(ctx context.Context) (harness.Stuck, error) { return h.DeadNode(ctx, "dead", "w-3", "w-1") },
	}, {
		name:  "VolumeAttachment of a deleted Node",
		cause: diagnose.CauseDeletedNode,
		fix:   fixCures, fixSays: "Deleted volumeattachment",
		stuck: func(ctx context.Context) (harness.Stuck, error) { return h.DeletedNode(ctx, "deleted", "w-4", "w-2") },
	}, {
		name:  "two workloads share one RWO claim on two nodes",
		cause: diagnose.CauseSharedClaim,
		fix:   fixRefuses, fixSays: "nothing to cure automatically (shared-claim",
		stuck: func(ctx context.Context) (harness.Stuck, error) { return h.SharedClaim(ctx, "shared", "w-2", "w-1") },
		cure: func(ctx context.Context, s harness.Stuck) error {
			return h.Cluster.Client().CoreV1().Pods(s.Namespace).Delete(ctx, s.Holder, metav1.DeleteOptions{})
		},
	}, {
		name:  "the driver reports an attach error",
		cause: diagnose.CauseAttachError,
		fix:   fixRefuses, fixSays: "nothing to cure automatically (attach-error",
		stuck: func(ctx context.Context) (harness.Stuck, error) {
			return h.AttachError(ctx, "attach-error", "w-1", attachErrorMessage)
		},
		cure: func(ctx context.Context, s harness.Stuck) error {
			h.Attacher.FailAttach(s.PV, s.Node, "")
			return nil
		},
	}, {
		name:  "ReadWriteOncePod claim wanted by a second pod",
		cause: diagnose.CauseReadWriteOncePod,
		fix:   fixRefuses, fixSays: "nothing to cure automatically (readwriteoncepod",
		stuck: func(ctx context.Context) (harness.Stuck, error) { return h.ReadWriteOncePod(ctx, "rwop", "w-1", "w-2") },
		cure: func(ctx context.Context, s harness.Stuck) error {
			return h.Cluster.Client().CoreV1().Pods(s.Namespace).Delete(ctx, s.Holder, metav1.DeleteOptions{})
		},
	}, {
		name:  "ReadWriteOncePod claim wanted by a second pod bound past the scheduler",
		cause: diagnose.CauseReadWriteOncePod,
		fix:   fixRefuses, fixSays: "nothing to cure automatically (readwriteoncepod",
		stuck: func(ctx context.Context) (harness.Stuck, error) {
			return h.ReadWriteOncePodBound(ctx, "rwop-bound", "w-2", "w-1")
		},
		cure: func(ctx context.Context, s harness.Stuck) error {
			return h.Cluster.Client().CoreV1().Pods(s.Namespace).Delete(ctx, s.Holder, metav1.DeleteOptions{})
		},
	}}

	// All cases run at once, in goroutines (go test runs only GOMAXPROCS
	// parallel subtests at a time, and most of each case is waiting); the
	// subtests report them in order. A case stops at its first error.
	type outcome struct {
		s                   harness.Stuck
		stuckAfter, curedIn time.Duration
		kubectl             string
		diag                diagnosis
		err                 error
	}
	outcomes := make([]chan outcome, len(cases))
	for i, c := range cases {
		outcomes[i] = make(chan outcome, 1)
		go func() {
			var o outcome
			defer func() { outcomes[i] <- o }()
			t0 := time.Now()
			if o.s, o.err = c.stuck(ctx); o.err != nil {
				return
			}
			o.stuckAfter = time.Since(t0)
			o.kubectl = kubectlView(ctx, h, o.s)
			t1 := time.Now()
			if o.diag, o.err = runDiagnose(ctx, h, o.s); o.err != nil {
				return
			}
			if c.fix == fixRefuses {
				if o.err = c.cure(ctx, o.s); o.err != nil {
					return
				}
			}
			o.err = waitCured(ctx, h, &o.s)
			o.curedIn = time.Since(t1)
		}()
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := <-outcomes[i]
			if o.err != nil {
				t.Fatalf("%v (so far: %v)", o.err, o.s)
			}
			t.Logf("stuck after %.1fs: %v\n%s", o.stuckAfter.Seconds(), o.s, o.kubectl)
			o.diag.check(t, o.s, c.cause, c.fix, c.fixSays)
			requireSafe(t, h, o.s.PV)
			t.Logf("Running on %s %.1fs after the cure", o.s.Node, o.curedIn.Seconds())
		})
	}
	t.Logf("all causes reproduced and cured in %.1fs (harness start not counted)", secs(time.Now(), start))
}

// waitCured waits until the stuck pod runs and writes (for a pod that was
// not scheduled, on the node it is scheduled on now, which it sets).
func waitCured(ctx context.Context, h *harness.Harness, s *harness.Stuck) error {
	p, err := h.WaitPodRunning(ctx, s.Namespace, s.Pod, s.Node, podTimeout)
	if err != nil {
		return err
	}
	s.Node = p.Spec.NodeName
	return h.WaitWriter(ctx, s.PV, s.Node, 2, podTimeout)
}

// fixOutcome is what `fenced diagnose --fix --yes` must do in a case.
type fixOutcome int

const (
	// fixCures: the cure is safe and --fix is the cure.
	fixCures fixOutcome = iota + 1
	// fixRefuses: --fix changes nothing (it refuses, or has nothing it may
	// do), and the manual cure follows.
	fixRefuses
)

// diagnosis is what `fenced diagnose` said about a stuck pod: as text,
// as JSON, and what --fix --yes did.
type diagnosis struct {
	text, json, fix          string
	textCode, jsonCode, fixC int
}

// runDiagnose runs, on the stuck pod, `fenced diagnose`, then with -o
// json, then with --fix --yes, as an operator would.
func runDiagnose(ctx context.Context, h *harness.Harness, s harness.Stuck) (diagnosis, error) {
	var d diagnosis
	target := []string{"diagnose", s.Pod, "-n", s.Namespace}
	var err error
	var errOut string
	if d.text, errOut, d.textCode, err = h.Fenced(ctx, target...); err != nil {
		return d, err
	}
	d.text += errOut
	if d.json, _, d.jsonCode, err = h.Fenced(ctx, append(target, "-o", "json")...); err != nil {
		return d, err
	}
	if d.fix, errOut, d.fixC, err = h.Fenced(ctx, append(target, "--fix", "--yes")...); err != nil {
		return d, err
	}
	d.fix += errOut
	return d, nil
}

// check asserts that diagnose named the cause of s — in the text, and in
// the JSON as the one finding for its pod and volume — with exit code 1,
// and that --fix did what fix says.
func (d diagnosis) check(t *testing.T, s harness.Stuck, want diagnose.Cause, fix fixOutcome, fixSays string) {
	t.Helper()
	t.Logf("$ fenced diagnose %s -n %s\n%s", s.Pod, s.Namespace, d.text)
	t.Logf("$ fenced diagnose %s -n %s --fix --yes\n%s", s.Pod, s.Namespace, d.fix)
	if d.textCode != 1 || !strings.Contains(d.text, string(want)) {
		t.Errorf("fenced diagnose: exit %d, want 1 and the cause %q in the text", d.textCode, want)
	}
	var r diagnose.Report
	if err := json.Unmarshal([]byte(d.json), &r); err != nil || d.jsonCode != 1 {
		t.Fatalf("fenced diagnose -o json: exit %d, %v\n%s", d.jsonCode, err, d.json)
	}
	var found *diagnose.Finding
	for i, f := range r.Findings {
		if f.Pod == s.Namespace+"/"+s.Pod && f.Volume == s.PV {
			found = &r.Findings[i]
		}
	}
	switch {
	case found == nil:
		t.Errorf("no finding for pod %s/%s and volume %s in:\n%s", s.Namespace, s.Pod, s.PV, d.json)
	case found.Cause != want:
		t.Errorf("cause %q, want %q: %s", found.Cause, want, found.Summary)
	case s.VolumeAttachment != "" && found.Attachment != s.VolumeAttachment && want != diagnose.CauseAttachError && want != diagnose.CauseReadWriteOncePod:
		t.Errorf("the finding names VolumeAttachment %q, want %q", found.Attachment, s.VolumeAttachment)
	case found.Fix.Command == "":
		t.Errorf("the finding has no command to cure it: %+v", found.Fix)
	}
	wantCode := map[fixOutcome]int{fixCures: 0, fixRefuses: 1}[fix]
	if d.fixC != wantCode || !strings.Contains(d.fix, fixSays) {
		t.Errorf("fenced diagnose --fix --yes: exit %d, want %d and %q", d.fixC, wantCode, fixSays)
	}
}

// kubectlView is what an operator sees of the stuck pod: its Events, and
// the volume's VolumeAttachments.
func kubectlView(ctx context.Context, h *harness.Harness, s harness.Stuck) string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ kubectl events -n %s --for pod/%s\n", s.Namespace, s.Pod)
	out, err := h.Kubectl(ctx, "events", "-n", s.Namespace, "--for", "pod/"+s.Pod)
	if err != nil {
		out = err.Error()
	}
	b.WriteString(out)
	fmt.Fprintf(&b, "$ kubectl get volumeattachments -o wide | grep %s\n", s.PV)
	if out, err = h.Kubectl(ctx, "get", "volumeattachments", "-o", "wide"); err != nil {
		return b.String() + err.Error()
	}
	for i, l := range strings.Split(out, "\n") {
		if i == 0 || strings.Contains(l, " "+s.PV+" ") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
