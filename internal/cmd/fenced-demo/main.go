// Command fenced-demo is `make demo`: it starts the local cluster with
// three machines behind simulated BMCs and fenced on each, runs a
// StatefulSet with a ReadWriteOnce volume, pulls the plug on its machine,
// prints what happened and when, powers the machine back on, and tears
// everything down.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/csi"
	"fenced.io/fenced/internal/testbed/harness"
)

const (
	victim  = "worker-1"
	spare   = "worker-2"
	timeout = 3 * time.Minute
)

func main() {
	cluster.HandleSignals = false // the demo tears down itself, in order
	failed := harness.RunStandalone(func(tb *harness.Standalone) {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		demo(ctx, tb)
	})
	if failed {
		fmt.Println("\nthe demo failed; the messages above say where")
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}

func demo(ctx context.Context, tb *harness.Standalone) {
	step("starting a control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and 3 machines,")
	fmt.Println("    each a network namespace with a hollow kubelet and a fenced agent, behind an ipmi_sim BMC")
	start := time.Now()
	h := harness.Start(ctx, tb, harness.Options{
		Machines: []string{"control-1", victim, spare},
		Fencing:  &harness.Fencing{Fencers: []string{"control-1"}},
	})
	fmt.Printf("    ready in %.1fs: Kubernetes %s; control-1 runs the fencer (BMC inventory), the workers run observers\n",
		time.Since(start).Seconds(), h.Cluster.Version)

	step("deploying StatefulSet demo/db (1 replica, ReadWriteOnce volume) on %s", victim)
	sts, err := h.CreateStatefulSet(ctx, "demo", "db", victim, spare)
	check(tb, err)
	pod, err := h.WaitPodRunning(ctx, sts.Namespace, sts.PodName(), victim, timeout)
	check(tb, err)
	check(tb, h.WaitWriter(ctx, sts.PV, victim, 5, timeout))
	fmt.Printf("    pod %s Running on %s, writing to volume %s\n", sts.PodName(), victim, sts.PV)

	step("pulling the plug on %s (SIGKILL of its whole process group; its BMC stays up)", victim)
	r, t0, err := h.PowerLossRecovery(ctx, sts, string(pod.UID), victim, spare, timeout)
	check(tb, err)
	if !r.Recovered() {
		tb.Fatalf("the workload did not recover within %s: %+v", timeout, r)
	}
	check(tb, h.WaitWriter(ctx, sts.PV, spare, 5, timeout))

	step("switching %s back on through its BMC", victim)
	check(tb, h.PowerOnRecovery(ctx, &r, victim, t0, timeout))

	step("timeline (seconds after the power loss)")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	for _, row := range []struct {
		what string
		at   time.Duration
	}{
		{"gossip: agent declared dead, fencer suspects the node", r.Detected},
		{"BMC read: power off (the evidence)", r.PowerOff},
		{"out-of-service taint applied, pods force-deleted", r.Tainted},
		{"old VolumeAttachment gone: volume released", r.VolumeReleased},
		{"pod Running on " + spare + " with the volume", r.PodRunning},
		{victim + " switched back on through its BMC", r.PoweredOn},
		{victim + " back (Ready, new boot ID)", r.NodeBack},
		{"taint removed by fenced", r.TaintRemoved},
	} {
		fmt.Fprintf(w, "    %6.1fs\t%s\n", row.at.Seconds(), row.what)
	}
	_ = w.Flush()
	fmt.Println("    without fenced, the pod would stay Terminating on the dead node and its volume attached (see docs/multi-attach.md)")

	step("the evidence fenced recorded on the Node (annotation fenced.io/evidence)")
	if r.Evidence != nil {
		b, _ := json.MarshalIndent(r.Evidence, "    ", "  ")
		fmt.Printf("    %s\n", b)
	}

	step("Events on node %s", victim)
	evs, err := h.Cluster.Client().CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + victim})
	check(tb, err)
	for _, e := range evs.Items {
		if strings.HasPrefix(e.Source.Component, "fenced") || strings.Contains(e.Reason, "OutOfService") {
			fmt.Printf("    %-8s %-28s %s\n", e.Type, e.Reason, shorten(e.Message, 110))
		}
	}

	report, err := h.CheckVolume(sts.PV)
	check(tb, err)
	check(tb, report.Err())
	step("data safety: %d records on the volume, writers in order %s, no overlap", report.Records, writers(report.Writers))
	step("tearing down")
}

func writers(ws []csi.WriterStats) string {
	var s []string
	for _, w := range ws {
		s = append(s, fmt.Sprintf("%s (%d)", w.Node, w.Count))
	}
	return strings.Join(s, " → ")
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func check(tb *harness.Standalone, err error) {
	if err != nil {
		tb.Fatal(err)
	}
}
