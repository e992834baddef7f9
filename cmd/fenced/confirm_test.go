package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestOperatorCommandsAgainstARealCluster runs confirm, status and unfence
// as an operator would, against a real API server and a real BMC simulator
// whose chassis power is a process.
func TestOperatorCommandsAgainstARealCluster(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true})
	client := c.Client()
	const uuid = "6b1a3c52-8f0e-4d2a-9c41-3e5f7a9b0c1d"
	sim := ipmisim.Start(t, ipmisim.Options{Name: "node-a", SystemUUID: uuid})
	common := []string{"--config", inventoryFor(t, map[string]*ipmisim.Sim{"node-a": sim}), "--kubeconfig", c.Kubeconfig}
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		code, out, errOut := fenced(t, ctx, append(args, common...)...)
		t.Logf("fenced %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		return code, out, errOut
	}

	now := metav1.Now()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{
			NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1", SystemUUID: uuid},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// fenced's namespace, where the history and the pause live.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fenced-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	adminUser := review.Status.UserInfo.Username
	node := func() *corev1.Node {
		t.Helper()
		n, err := client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Without a terminal and without --yes: nothing read, nothing written.
	code, out, errOut := cli("confirm", "node-a", "--reason", "test")
	if code != exitUsage || !strings.Contains(errOut, "pass --yes") || out != "" {
		t.Fatalf("confirm without --yes: code %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	// While the machine runs, the BMC reads on: refused, nothing written.
	code, out, errOut = cli("confirm", "node-a", "--yes", "--reason", "test")
	if code != exitFailure || !strings.Contains(errOut, "power ON") || !strings.Contains(out, "power on, system GUID "+uuid+" (matches") {
		t.Fatalf("confirm while on: code %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if taint.HasTaint(node()) {
		t.Fatal("confirm tainted a node whose BMC reads on")
	}

	// Pull the plug; the BMC reads off once it has noticed.
	if err := sim.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for state, _ := sim.ToolPowerState(); state != "off"; state, _ = sim.ToolPowerState() {
		if time.Now().After(deadline) {
			t.Fatalf("BMC still reads %q after the power loss", state)
		}
		time.Sleep(200 * time.Millisecond)
	}

	code, out, errOut = cli("confirm", "node-a", "--yes", "--reason", "test")
	if code != exitOK || !strings.Contains(out, "Tainted node node-a") {
		t.Fatalf("confirm after power loss: code %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	n := node()
	ev, ok, err := taint.EvidenceOf(n)
	if !taint.HasTaint(n) || !ok || err != nil || ev.Method != vocab.EvidenceManual || ev.By != adminUser || ev.Reason != "test" ||
		ev.BootID != "boot-1" || ev.BMC == nil || ev.BMC.Power != "off" || ev.BMC.SystemGUID != uuid {
		t.Fatalf("after confirm: taints %+v, evidence %+v (%v, %v)", n.Spec.Taints, ev, ok, err)
	}
	if n.Annotations[taint.AnnotationAppliedBy] != "fenced-confirm/"+adminUser {
		t.Errorf("applied-by = %q", n.Annotations[taint.AnnotationAppliedBy])
	}
	// The command waits for its Events before it exits.
	sel := fields.Set{"involvedObject.name": "node-a", "reason": string(vocab.EventManualFenceConfirmed)}.AsSelector().String()
	if evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel}); err != nil ||
		len(evs.Items) != 1 || evs.Items[0].Type != corev1.EventTypeWarning || !strings.Contains(evs.Items[0].Message, adminUser) {
		t.Errorf("ManualFenceConfirmed events: %v, %v", evs, err)
	}

	code, out, errOut = cli("status")
	if code != exitOK {
		t.Fatalf("status: code %d, stderr %s", code, errOut)
	}
	if row := rowOf(out, "node-a"); !strings.Contains(row, " off ") || !strings.Contains(row, " fenced ") ||
		!strings.Contains(row, "manual by "+adminUser) || !strings.HasPrefix(rowOf(out, "NAME"), "NAME") {
		t.Fatalf("status:\n%s", out)
	}
	code, out, _ = cli("status", "-o", "json")
	var st admin.Status
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || len(st.Nodes) != 1 || st.Nodes[0].Taint != admin.TaintFenced {
		t.Fatalf("status -o json: code %d\n%s", code, out)
	}

	// kubectl's output formats read the same document.
	for _, tc := range []struct{ args, want string }{
		{"-o name", "node/node-a\n"},
		{"-o jsonpath={.nodes[0].taint}", "fenced"},
		{"-o custom-columns=NODE:.name,TAINT:.taint,BY:.evidence.by --no-headers", "node-a  fenced  " + adminUser + "\n"},
	} {
		if code, out, _ := cli(append([]string{"status"}, strings.Fields(tc.args)...)...); code != exitOK || out != tc.want {
			t.Errorf("status %s: code %d, %q; want %q", tc.args, code, out, tc.want)
		}
	}
	// A NODE completes with the API's Nodes (no configuration here).
	if code, out, _ := fenced(t, ctx, "__complete", "--kubeconfig", c.Kubeconfig, "unfence", "no"); code != exitOK || out != "node-a\n:4\n" {
		t.Errorf("completion of unfence NODE: code %d, %q", code, out)
	}
	// A Node that does not exist is a usage error.
	if code, _, errOut := cli("confirm", "node-z", "--yes"); code != exitUsage || !strings.Contains(errOut, `unknown node "node-z": no such Node`) {
		t.Errorf("confirm node-z: code %d, stderr %s", code, errOut)
	}

	// Same boot ID: the node never came back, so the taint stays.
	code, out, errOut = cli("unfence", "node-a")
	if code != exitFailure || !strings.Contains(out, "same boot ID boot-1") || !strings.Contains(errOut, "stays fenced") {
		t.Fatalf("unfence with the same boot: code %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !taint.HasTaint(node()) {
		t.Fatal("unfence removed the taint despite the same boot ID")
	}

	// The machine rebooted and its kubelet reported in.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := node()
		n.Status.NodeInfo.BootID = "boot-2"
		now := metav1.Now()
		for i := range n.Status.Conditions {
			if c := &n.Status.Conditions[i]; c.Type == corev1.NodeReady {
				c.Status, c.Reason, c.LastHeartbeatTime, c.LastTransitionTime = corev1.ConditionTrue, "KubeletReady", now, now
			}
		}
		_, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = cli("unfence", "node-a", "--reason", "back")
	if code != exitOK || !strings.Contains(out, "Removed") {
		t.Fatalf("unfence after reboot: code %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if n := node(); taint.HasTaint(n) || taint.AppliedByFenced(n) {
		t.Fatalf("after unfence: taints %+v, annotations %v", n.Spec.Taints, n.Annotations)
	}

	// The fence history keeps the confirm and the unfence, newest first.
	code, out, errOut = cli("history", "node-a")
	if code != exitOK || !strings.Contains(out, "fenced-unfence/"+adminUser) || !strings.Contains(out, "fenced-confirm/"+adminUser) ||
		strings.Index(out, "unfence") > strings.Index(out, "fenced-confirm/") {
		t.Fatalf("history: code %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	// The switches, written as the fencers read them, and shown by status.
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "--reason", "SAN update"}, "configmap/fenced-system/fenced-pause: not paused -> paused: SAN update"},
		{[]string{"pause", "--reason", "SAN update"}, "paused: SAN update already: nothing changed"},
		{[]string{"status"}, "paused:            YES: SAN update"},
		{[]string{"resume"}, "paused: SAN update -> not paused"},
		{[]string{"exclude", "node-a", "--reason", "firmware"}, "node/node-a: included -> excluded (fenced.io/exclude=true)"},
		{[]string{"status"}, "excluded nodes:    1"},
		{[]string{"include", "node-a"}, "node/node-a: excluded (fenced.io/exclude=true) -> included"},
		{[]string{"include", "node-a"}, "included already: nothing changed"},
	} {
		code, out, errOut := cli(step.args...)
		if code != exitOK || !strings.Contains(out, step.want) {
			t.Fatalf("fenced %v: code %d, want %q\nstdout: %s\nstderr: %s", step.args, code, step.want, out, errOut)
		}
	}
	if cm, err := client.CoreV1().ConfigMaps("fenced-system").Get(ctx, taint.PauseConfigMap, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if paused, _ := taint.Paused(cm); paused {
		t.Fatalf("still paused after resume: %v", cm.Data)
	}
	sel = fields.Set{"involvedObject.name": "node-a", "reason": string(vocab.EventNodeExcludedFromFencing)}.AsSelector().String()
	if evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel}); err != nil ||
		len(evs.Items) != 1 || !strings.Contains(evs.Items[0].Message, adminUser) || !strings.Contains(evs.Items[0].Message, "firmware") {
		t.Errorf("NodeExcludedFromFencing events: %v, %v", evs, err)
	}
	sel = fields.Set{"involvedObject.name": taint.PauseConfigMap, "reason": string(vocab.EventPauseRequested)}.AsSelector().String()
	if evs, err := client.CoreV1().Events("fenced-system").List(ctx, metav1.ListOptions{FieldSelector: sel}); err != nil ||
		len(evs.Items) != 1 || !strings.Contains(evs.Items[0].Message, "SAN update") {
		t.Errorf("PauseRequested events: %v, %v", evs, err)
	}

	// A power action by hand leaves an Event naming who and why.
	code, _, errOut = cli("bmc", "off", "node-a", "--yes", "--reason", "end of test", "--power-wait", "100ms")
	if code != exitOK {
		t.Fatalf("bmc off: code %d, stderr %s", code, errOut)
	}
	sel = fields.Set{"involvedObject.name": "node-a", "reason": string(vocab.EventManualPowerOff)}.AsSelector().String()
	if evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel}); err != nil ||
		len(evs.Items) != 1 || evs.Items[0].Type != corev1.EventTypeWarning || !strings.Contains(evs.Items[0].Message, adminUser) ||
		!strings.Contains(evs.Items[0].Message, "end of test") || evs.Items[0].InvolvedObject.UID != node().UID {
		t.Errorf("ManualPowerOff events: %v, %v", evs, err)
	}
}

// rowOf returns the line of a table that starts with name.
func rowOf(table, name string) string {
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l + " "
		}
	}
	return ""
}

func TestOperatorCommandsHelpAndUsage(t *testing.T) {
	ctx := context.Background()
	for _, cmd := range []string{"confirm", "unfence", "status", "pause", "resume", "exclude", "include", "history"} {
		code, out, _ := fenced(t, ctx, cmd, "--help")
		if code != exitOK || !strings.Contains(out, "Examples:") {
			t.Errorf("fenced %s --help: code %d, no example:\n%s", cmd, code, out)
		}
	}
	for _, args := range [][]string{{"confirm"}, {"unfence", "a", "b"}, {"status", "extra"}, {"status", "-o", "xml"}, {"confirm", "a", "-y"},
		{"pause", "extra"}, {"exclude"}, {"include", "a", "b"}, {"resume", "-o", "xml"}, {"history", "a", "b"}} {
		if code, _, errOut := fenced(t, ctx, args...); code != exitUsage {
			t.Errorf("fenced %v: code %d, want %d (%s)", args, code, exitUsage, errOut)
		}
	}
}
