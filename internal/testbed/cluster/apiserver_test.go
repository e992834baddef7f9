package cluster

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAPIServerRestart stops kube-apiserver, checks that clients are refused,
// starts it again and checks that the clients made before the outage — the
// admin Client and a node kubeconfig — work again, that the objects created
// before it are still there, that the controller manager serves the API
// again (a new namespace gets its default ServiceAccount), that the log was
// appended to, and that Stop still leaves nothing behind.
func TestAPIServerRestart(t *testing.T) {
	ctx, c := StartForTest(t, Options{NoScheduler: true})
	client := c.Client()

	const ns, node = "before", "node-a"
	if _, err := c.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: ns}, Data: map[string]string{"k": "v"}}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, readyNode(node), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	asNode := nodeClient(t, c, node)
	if _, err := asNode.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		t.Fatalf("node client before the outage: %v", err)
	}
	oldGroups := c.ProcessGroups()
	if len(oldGroups) != 3 {
		t.Fatalf("%d process groups, want 3 (etcd, apiserver, controller-manager)", len(oldGroups))
	}

	began := time.Now()
	c.StopAPIServer()
	t.Logf("StopAPIServer took %.1fs", time.Since(began).Seconds())
	if !c.APIServerDown() {
		t.Error("APIServerDown() is false after StopAPIServer")
	}
	if groupAlive(oldGroups[1]) {
		t.Errorf("kube-apiserver's process group %d still alive after StopAPIServer", oldGroups[1])
	}
	c.StopAPIServer() // a second stop does nothing
	for name, get := range map[string]func() error{
		"admin client": func() error {
			_, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{})
			return err
		},
		"node client": func() error {
			_, err := asNode.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s while the API server is down: got %v, want connection refused", name, err)
		} else {
			t.Logf("%s while the API server is down: %v", name, err)
		}
	}

	began = time.Now()
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatalf("StartAPIServer: %v", err)
	}
	t.Logf("StartAPIServer took %.1fs", time.Since(began).Seconds())
	if c.APIServerDown() {
		t.Error("APIServerDown() is true after StartAPIServer")
	}
	if err := c.StartAPIServer(ctx); err != nil {
		t.Errorf("StartAPIServer on a running server: %v, want nil", err)
	}
	got, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("ConfigMap created before the outage: %v, %v", got, err)
	}
	if _, err := asNode.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		t.Errorf("node client after the outage: %v", err)
	}
	// The controller manager lost its watches with the server; its
	// serviceaccount controller must pick up a namespace made afterwards.
	began = time.Now()
	if _, err := c.CreateNamespace(ctx, "after"); err != nil {
		t.Errorf("controller manager after the outage: %v", err)
	} else {
		t.Logf("the controller manager served a new namespace %.1fs after the restart", time.Since(began).Seconds())
	}

	log, err := os.ReadFile(c.LogPath(APIServer))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "\n### started "); n != 2 {
		t.Errorf("%s has %d \"### started\" lines, want 2 (appended, not truncated)", c.LogPath(APIServer), n)
	}
	if !strings.Contains(string(log), "\n### stopped ") {
		t.Errorf("%s lacks the \"### stopped\" line of the first server", c.LogPath(APIServer))
	}

	newGroups := c.ProcessGroups()
	if len(newGroups) != 3 || newGroups[1] == oldGroups[1] {
		t.Errorf("process groups %v after the restart (before %v): want the API server's replaced in place", newGroups, oldGroups)
	}
	c.Stop()
	for _, pgid := range newGroups {
		if groupAlive(pgid) {
			t.Errorf("process group %d still has processes after Stop", pgid)
		}
	}
	if kids := children(t, os.Getpid()); len(kids) > 0 {
		t.Errorf("child processes left after Stop: %v", kids)
	}
	if err := c.StartAPIServer(ctx); err == nil {
		t.Error("StartAPIServer after Stop succeeded")
	}
}
