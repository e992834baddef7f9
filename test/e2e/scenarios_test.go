// Package e2e runs node-failure scenarios on the local cluster harness:
// real control plane, hollow-kubelet machines behind ipmi_sim BMCs, real
// network namespaces, Kubernetes' default timings.
package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenced.io/fenced/internal/testbed/csi"
	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/poll"
)

// TestMain runs the scenarios. Every scenario starts its own control
// plane, network (a random /24 and bridge) and machines, so they share
// nothing, and each calls harness.Parallel: most of a scenario's time is
// spent waiting on Kubernetes (a 50 s node-monitor grace period, pod
// rescheduling), so two at a time (-parallel defaults to GOMAXPROCS)
// cut the package's wall time on two cores, where one at a time left the
// other core idle for most of make test. On a host whose inotify limit is
// too low for that, they run one at a time (harness.Parallel says so).
func TestMain(m *testing.M) {
	code := m.Run()
	harness.Cleanup()
	os.Exit(code)
}

// Generous deadlines: NotReady alone takes the 50 s node-monitor grace
// period, and CI machines are loaded.
const (
	notReadyTimeout = 3 * time.Minute
	podTimeout      = 3 * time.Minute
)

// TestWithoutFencing shows the problem fenced exists for, and the manual
// cure operators apply today, on five machines at once.
func TestWithoutFencing(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{Machines: []string{"node-a", "node-b", "node-c", "node-d", "node-e"}})

	t.Run("power loss: Multi-Attach, then a manual out-of-service taint cures it", func(t *testing.T) {
		t.Parallel()
		powerLossAndManualCure(ctx, t, h, "node-a", "node-b")
	})
	t.Run("hang: BMC reads on, writer frozen; an unsafe taint lets two writers overlap", func(t *testing.T) {
		t.Parallel()
		hangAndUnsafeTaint(ctx, t, h, "node-c", "node-d")
	})
	t.Run("partition from the API server: NotReady, BMC reads on, writer still writing", func(t *testing.T) {
		t.Parallel()
		partitionFromAPI(ctx, t, h, "node-e")
	})
}

func powerLossAndManualCure(ctx context.Context, t *testing.T, h *harness.Harness, victim, spare string) {
	sts, oldPodUID := startWorkload(ctx, t, h, "power-loss", victim, spare)
	m := h.Machine(victim)
	waitWriter(t, h, sts.PV, victim, 3)

	t0 := time.Now()
	must(t, m.PowerLoss())
	waitPower(t, m, "off")
	tOff := time.Now()
	must(t, h.WaitNodeNotReady(ctx, victim, notReadyTimeout))
	tNotReady := time.Now()

	// A second pod of the volume on the spare machine cannot attach it.
	must(t, h.CreatePodOn(ctx, sts.Namespace, "probe", spare, sts.PVC))
	ev, err := h.WaitMultiAttach(ctx, sts.Namespace, "probe", podTimeout)
	must(t, err)
	t.Logf("event on the probe pod: %s %s", ev.Reason, ev.Message)
	tMultiAttach := time.Now()
	requireAttachedTo(ctx, t, h, sts.PV, victim)
	must(t, h.Cluster.Client().CoreV1().Pods(sts.Namespace).Delete(ctx, "probe", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))

	// The manual cure: the power is verified off, so the taint is safe.
	tTaint := time.Now()
	must(t, h.TaintOutOfService(ctx, victim))
	tPodGone, tVAGone, tRunning := requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
	requireSafe(t, h, sts.PV)

	t.Logf("timeline (power loss at 0):\n"+
		"  BMC reads off             %6.1fs\n"+
		"  node NotReady             %6.1fs\n"+
		"  Multi-Attach error seen   %6.1fs\n"+
		"manual cure (taint at 0):\n"+
		"  old pod force-deleted     %6.1fs\n"+
		"  old VolumeAttachment gone %6.1fs\n"+
		"  pod Running on %s     %6.1fs",
		secs(tOff, t0), secs(tNotReady, t0), secs(tMultiAttach, t0),
		secs(tPodGone, tTaint), secs(tVAGone, tTaint), spare, secs(tRunning, tTaint))
}

func hangAndUnsafeTaint(ctx context.Context, t *testing.T, h *harness.Harness, victim, spare string) {
	sts, oldPodUID := startWorkload(ctx, t, h, "hang", victim, spare)
	m := h.Machine(victim)
	waitWriter(t, h, sts.PV, victim, 3)

	must(t, m.Hang()) // returns once every process of the machine is stopped
	t.Cleanup(func() { _ = m.Resume() })
	before := writerRecords(t, h, sts.PV, victim)
	time.Sleep(3 * time.Second) // a running writer writes several records in this window
	if after := writerRecords(t, h, sts.PV, victim); after != before {
		t.Fatalf("hung machine kept writing: %d records, then %d", before, after)
	}
	waitPower(t, m, "on")
	must(t, h.WaitNodeNotReady(ctx, victim, notReadyTimeout))
	waitPower(t, m, "on") // a hung node is still powered: no evidence for a taint

	// Deliberately unsafe: taint a node whose BMC says it is on.
	must(t, h.TaintOutOfService(ctx, victim))
	requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
	requireSafe(t, h, sts.PV) // not yet: the old writer is still frozen

	// The node wakes up and its writer carries on: two writers, one disk.
	must(t, m.Resume())
	var report csi.Report
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		r, err := h.CheckVolume(sts.PV)
		report = r
		return err == nil && len(report.Overlaps) > 0, nil
	})
	if err != nil {
		t.Fatalf("the checker saw no overlap after the hung node resumed: %+v", report)
	}
	o := report.Overlaps[0]
	if o.Old.Node != victim || o.New.Node != spare {
		t.Fatalf("overlap names %v (old) and %v (new); want %s then %s", o.Old, o.New, victim, spare)
	}
	t.Logf("the checker caught it, as it must: %v", report.Err())
}

func partitionFromAPI(ctx context.Context, t *testing.T, h *harness.Harness, victim string) {
	sts, _ := startWorkload(ctx, t, h, "partition", victim)
	m := h.Machine(victim)
	waitWriter(t, h, sts.PV, victim, 3)

	must(t, m.PartitionFromAPI())
	t.Cleanup(func() { _ = m.Heal() })
	must(t, h.WaitNodeNotReady(ctx, victim, notReadyTimeout))
	waitPower(t, m, "on")
	before := writerRecords(t, h, sts.PV, victim)
	waitWriter(t, h, sts.PV, victim, before+10) // still writing: tainting now would corrupt
	requireAttachedTo(ctx, t, h, sts.PV, victim)

	must(t, m.Heal())
	must(t, h.WaitNodeReady(ctx, victim, notReadyTimeout))
	requireSafe(t, h, sts.PV)
}

// requireMoved waits until the StatefulSet's old pod is gone, victim's
// VolumeAttachment is gone and the new pod runs on spare and writes, and
// returns when each of the first three happened.
func requireMoved(ctx context.Context, t *testing.T, h *harness.Harness, sts harness.StatefulSet, oldPodUID, victim, spare string) (podGone, vaGone, running time.Time) {
	t.Helper()
	must(t, h.WaitPodGone(ctx, sts.Namespace, sts.PodName(), oldPodUID, podTimeout))
	podGone = time.Now()
	must(t, h.WaitNoVolumeAttachment(ctx, sts.PV, victim, podTimeout))
	vaGone = time.Now()
	_, err := h.WaitPodRunning(ctx, sts.Namespace, sts.PodName(), spare, podTimeout)
	must(t, err)
	running = time.Now()
	waitWriter(t, h, sts.PV, spare, 3)
	return podGone, vaGone, running
}

// startWorkload creates a StatefulSet in namespace ns preferring first and
// waits until its pod is Running there; it returns the pod's UID.
func startWorkload(ctx context.Context, t *testing.T, h *harness.Harness, ns, first string, others ...string) (harness.StatefulSet, string) {
	t.Helper()
	sts, err := h.CreateStatefulSet(ctx, ns, "db", first, others...)
	must(t, err)
	pod, err := h.WaitPodRunning(ctx, ns, sts.PodName(), first, podTimeout)
	must(t, err)
	return sts, string(pod.UID)
}

// writerRecords counts the records node's writers put on pv's disk.
func writerRecords(t *testing.T, h *harness.Harness, pv, node string) int {
	t.Helper()
	return h.Records(pv, node)
}

// waitWriter waits until node has written at least n records to pv.
func waitWriter(t *testing.T, h *harness.Harness, pv, node string, n int) {
	t.Helper()
	must(t, h.WaitWriter(context.Background(), pv, node, n, podTimeout))
}

// waitPower waits until ipmitool reads the machine's power as want.
func waitPower(t *testing.T, m *harness.Machine, want string) {
	t.Helper()
	must(t, m.WaitPower(context.Background(), want, podTimeout))
}

func requireAttachedTo(ctx context.Context, t *testing.T, h *harness.Harness, pv, node string) {
	t.Helper()
	vas, err := h.VolumeAttachments(ctx, pv)
	must(t, err)
	var nodes []string
	for _, va := range vas {
		nodes = append(nodes, va.Spec.NodeName)
		if va.Spec.NodeName == node && va.Status.Attached {
			return
		}
	}
	t.Fatalf("%s is not attached to %s (VolumeAttachments to %v)", pv, node, nodes)
}

func requireSafe(t *testing.T, h *harness.Harness, pv string) {
	t.Helper()
	r, err := h.CheckVolume(pv)
	must(t, err)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	var ws []string
	for _, w := range r.Writers {
		ws = append(ws, fmt.Sprintf("%s×%d", w.Node, w.Count))
	}
	t.Logf("data safety: %d records, writers in order %s, no overlap", r.Records, strings.Join(ws, " → "))
}

// requireBootGone waits until every process of the boot whose process
// group is pgid (Machine.ProcessGroup, taken before the fault) is dead:
// from then on no writer of that boot — a hung one, say — can write again,
// so a data-safety check after it is final, not a bet on how long a
// resumed writer would take to show itself.
func requireBootGone(t *testing.T, m *harness.Machine, pgid int) {
	t.Helper()
	poll.Until(t, podTimeout, fmt.Sprintf("every process of %s's old boot (process group %d) is dead", m.Name, pgid), func() bool {
		return harness.BootGone(pgid)
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func secs(a, b time.Time) float64 { return a.Sub(b).Seconds() }
