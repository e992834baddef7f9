package agent

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestWaitInternalIP: the agent waits for its Node, which its kubelet may
// register after the agent started, and for the Node's InternalIP; the
// informer's events wake it.
func TestWaitInternalIP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other"}})
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes()
	informer, lister := nodes.Informer(), nodes.Lister()
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("cache did not sync")
	}

	got := make(chan string, 1)
	errs := make(chan error, 1)
	go func() {
		ip, err := waitInternalIP(ctx, informer, lister, "node-a", slog.New(slog.NewTextHandler(io.Discard, nil)))
		errs <- err
		got <- ip
	}()

	// Registered without addresses first, as a kubelet may do.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatalf("returned before the Node had an InternalIP: %v, %q", err, <-got)
	case <-time.After(200 * time.Millisecond):
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "node-a"}, {Type: corev1.NodeInternalIP, Address: "198.18.0.10"}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if ip := <-got; err != nil || ip != "198.18.0.10" {
			t.Fatalf("waitInternalIP = %q, %v; want 198.18.0.10", ip, err)
		}
	case <-ctx.Done():
		t.Fatal("waitInternalIP did not return after the Node got its InternalIP")
	}

	// A cancelled wait returns the context's error.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := waitInternalIP(cctx, informer, lister, "missing", slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Fatal("waitInternalIP for a missing Node with a cancelled context succeeded")
	}
}

func TestAdvertisedAtNode(t *testing.T) {
	own := []string{"198.18.0.2:7946", "[2001:db8::2]:7946"}
	for _, tc := range []struct {
		name, advertise string
		own             []string
		ok              bool
	}{
		{"its InternalIP", "198.18.0.2", own, true},
		{"its IPv6 address", "2001:db8::2", own, true},
		{"another address: agents would not answer", "198.18.0.9", own, false},
		{"no Node addresses: not a ring member anyway", "127.0.0.1", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := advertisedAtNode("cp-1", tc.advertise, tc.own, 7946)
			if (err == nil) != tc.ok {
				t.Fatalf("advertisedAtNode(%s) = %v, want ok=%v", tc.advertise, err, tc.ok)
			}
		})
	}
}
