package fencer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Kubelet cadences when nothing changes: the node Lease every 10 s
// (nodeLeaseDurationSeconds 40 / 4), the Node status every 5 min
// (nodeStatusReportFrequency).
const (
	leaseRenewEvery   = 10 * time.Second
	statusReportEvery = 5 * time.Minute
	kubeletLeaseSecs  = 40
)

// kubelets keeps the Leases and Ready heartbeats of many Nodes alive, in
// batches spread evenly over each period, as the kubelets would — a few
// goroutines instead of a thousand hollow kubelets.
type kubelets struct {
	client kubernetes.Interface
	mu     sync.Mutex
	leases map[string]*coordinationv1.Lease
	dead   map[string]bool
	// renewals and failures count Lease updates.
	renewals, failures atomic.Int64
}

// simNode is one Node to register.
type simNode struct {
	name, ip, uuid string
}

// register creates the Nodes Ready and their Leases, workers at a time,
// logging progress.
func (k *kubelets) register(ctx context.Context, t *testing.T, nodes []simNode) {
	t.Helper()
	k.leases = map[string]*coordinationv1.Lease{}
	k.dead = map[string]bool{}
	created := time.Now().Add(-time.Hour)
	var done atomic.Int64
	progress := startProgress(t, "registering Nodes and Leases", func() string { return fmt.Sprintf("%d/%d", done.Load(), len(nodes)) })
	defer progress()
	parallel(ctx, t, len(nodes), 8, func(i int) error {
		n := nodes[i]
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{"kubernetes.io/hostname": n.name}}}
		node, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		// A patch of the status, as the kubelet sends: the controller
		// manager may have written the Node since it was created.
		now := metav1.Now()
		status := corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip}},
			NodeInfo:  corev1.NodeSystemInfo{BootID: "boot-" + n.name, SystemUUID: n.uuid, KubeletVersion: "v1.34.4"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: metav1.NewTime(created)}},
		}
		if err := k.patch(ctx, node.Name, status); err != nil {
			return err
		}
		l, err := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.name, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.name), LeaseDurationSeconds: ptr.To[int32](kubeletLeaseSecs),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		k.mu.Lock()
		k.leases[n.name] = l
		k.mu.Unlock()
		done.Add(1)
		return nil
	})
}

// run renews every live Lease once per leaseRenewEvery and posts every
// live Node's Ready heartbeat once per statusReportEvery, each spread
// evenly over its period, until ctx ends.
func (k *kubelets) run(ctx context.Context, names []string) {
	go k.pace(ctx, names, leaseRenewEvery, k.renew)
	go k.pace(ctx, names, statusReportEvery, k.heartbeat)
}

// pace calls do for each live name, one every period/len(names), by four
// workers (an API call may take longer than the pace).
func (k *kubelets) pace(ctx context.Context, names []string, period time.Duration, do func(context.Context, string)) {
	jobs := make(chan string)
	for range 4 {
		go func() {
			for n := range jobs {
				do(ctx, n)
			}
		}()
	}
	defer close(jobs)
	tick := time.NewTicker(period / time.Duration(len(names)))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % len(names) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if k.isDead(names[i]) {
			continue
		}
		select {
		case jobs <- names[i]:
		case <-ctx.Done():
			return
		}
	}
}

func (k *kubelets) isDead(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dead[name]
}

// powerOff stops the node's kubelet: no more renewals or heartbeats.
func (k *kubelets) powerOff(names ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, n := range names {
		k.dead[n] = true
	}
}

func (k *kubelets) renew(ctx context.Context, name string) {
	k.mu.Lock()
	l := k.leases[name].DeepCopy()
	k.mu.Unlock()
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	got, err := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		k.failures.Add(1)
		if got, err = k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return
		}
	} else {
		k.renewals.Add(1)
	}
	k.mu.Lock()
	if !k.dead[name] {
		k.leases[name] = got
	}
	k.mu.Unlock()
}

// heartbeat posts the Ready condition's heartbeat time, as the kubelet's
// status report does when nothing changed.
func (k *kubelets) heartbeat(ctx context.Context, name string) {
	if k.isDead(name) {
		return
	}
	// A map, not a NodeStatus: its nodeInfo would go out empty and wipe
	// the boot ID.
	_ = k.patch(ctx, name, map[string]any{"conditions": []any{map[string]any{"type": corev1.NodeReady,
		"status": corev1.ConditionTrue, "reason": "KubeletReady", "message": "kubelet is posting ready status",
		"lastHeartbeatTime": metav1.Now()}}})
}

// patch sends status as a strategic merge patch of the Node's status
// (conditions merge by type), as the kubelet does.
func (k *kubelets) patch(ctx context.Context, name string, status any) error {
	data, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = k.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	return err
}

// parallel runs do(0..n-1), workers at a time, and fails t with the first
// error.
func parallel(ctx context.Context, t *testing.T, n, workers int, do func(i int) error) {
	t.Helper()
	idx := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if err := do(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		select {
		case idx <- i:
		case <-ctx.Done():
		}
	}
	close(idx)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// startProgress logs what runs and how far it is every 5 s until the
// returned stop is called.
func startProgress(t *testing.T, what string, status func() string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				t.Logf("… %s: %s (%s)", what, status(), time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done) }
}
