package fencing

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// startFencer builds a fencer from cfg on informers of cfg.Client, as the
// agent does (one cluster-scoped factory, NewInformers for the Leases),
// starts the informers and runs the fencer until the test ends.
func startFencer(t *testing.T, cfg Config) *Fencer {
	t.Helper()
	return startFencerWatching(t, cfg, cfg.Client)
}

// startFencerWatching starts a fencer whose informers watch watched, which
// may be another client than the one it writes with: an informer that lags
// the API server.
func startFencerWatching(t *testing.T, cfg Config, watched kubernetes.Interface) *Fencer {
	t.Helper()
	f, ctx, cancel := newFencerWatching(t, cfg, watched)
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return f
}

// newFencerWatching builds a fencer on informers of watched and starts the
// informers, not the fencer; they stop when the test ends or ctx is
// cancelled.
func newFencerWatching(t *testing.T, cfg Config, watched kubernetes.Interface) (*Fencer, context.Context, context.CancelFunc) {
	t.Helper()
	cluster := informers.NewSharedInformerFactory(watched, 0)
	inf, leaseFactories := NewInformers(watched, cluster, cfg.LeaseNamespace)
	cfg.Informers = inf
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factories := append(leaseFactories, cluster)
	for _, fa := range factories {
		fa.Start(ctx.Done())
	}
	t.Cleanup(func() {
		cancel()
		for _, fa := range factories {
			fa.Shutdown()
		}
	})
	return f, ctx, cancel
}

// TestKubeletShuttingDown reads the kubelet's graceful-shutdown report from
// the Ready condition: only a not-Ready condition whose message carries the
// shutdown manager's words counts.
func TestKubeletShuttingDown(t *testing.T) {
	node := func(status corev1.ConditionStatus, msg string) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Message: "node is shutting down"},
			{Type: corev1.NodeReady, Status: status, Reason: "KubeletNotReady", Message: msg},
		}}}
	}
	tests := []struct {
		name string
		n    *corev1.Node
		want bool
	}{
		{"kubelet shutting down", node(corev1.ConditionFalse, "node is shutting down"), true},
		{"among other errors", node(corev1.ConditionFalse, "[container runtime is down, node is shutting down]"), true},
		{"not ready for another reason", node(corev1.ConditionFalse, "container runtime is down"), false},
		{"ready (message ignored)", node(corev1.ConditionTrue, "node is shutting down"), false},
		{"unknown: the kubelet stopped posting", node(corev1.ConditionUnknown, "Kubelet stopped posting node status."), false},
		{"no Ready condition", &corev1.Node{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kubeletShuttingDown(tt.n); got != tt.want {
				t.Errorf("kubeletShuttingDown = %v, want %v", got, tt.want)
			}
			if got := nodeObs(tt.n).ShuttingDown; got != tt.want {
				t.Errorf("nodeObs.ShuttingDown = %v, want %v", got, tt.want)
			}
		})
	}
}

func shuttingDownAt(n *corev1.Node) *corev1.Node {
	n.Status.Conditions[0].Message = "node is shutting down"
	return n
}

// TestNeverReady tells a joining node (not Ready since it registered) from
// one that was Ready and stopped.
func TestNeverReady(t *testing.T) {
	created := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	node := func(status corev1.ConditionStatus, changedAfter time.Duration) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status,
				LastTransitionTime: metav1.NewTime(created.Add(changedAfter))}}},
		}
	}
	tests := []struct {
		name string
		n    *corev1.Node
		want bool
	}{
		{"registered, not Ready yet", node(corev1.ConditionFalse, time.Second), true},
		{"registered, no status yet", &corev1.Node{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}, true},
		{"Ready", node(corev1.ConditionTrue, time.Second), false},
		{"was Ready, kubelet reports not Ready", node(corev1.ConditionFalse, time.Hour), false},
		{"was Ready, kubelet silent", node(corev1.ConditionUnknown, time.Hour), false},
		{"never posted status: the lifecycle controller's Unknown", node(corev1.ConditionUnknown, 50*time.Second), false},
		{"Ready, then shutting down within the join grace", shuttingDownAt(node(corev1.ConditionFalse, 20*time.Second)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := neverReady(tt.n); got != tt.want {
				t.Errorf("neverReady = %v, want %v", got, tt.want)
			}
		})
	}
}

// testPolicy is the decision core's test policy (pkg/fencing/core, decide_test.go),
// for fencers under test.
func testPolicy(mode vocab.Mode) core.Policy {
	p := core.DefaultPolicy()
	p.Mode, p.FenceAfter, p.MaxUnhealthy, p.MaxConcurrentPowerActions = mode, 30*time.Second, 0.5, 1
	p.FenceDelay, p.ForceDeletePods, p.PowerOnAfterFence, p.DryRun = 5*time.Second, true, false, false
	p.ShutdownWait = 2 * time.Minute
	return p
}

// TestNodeChanged: a Node update queues a decision only when it changes
// what the decision reads — a kubelet's status heartbeat or a new image
// list does not; Ready, a taint, an exclusion label or the InternalIP does.
func TestNodeChanged(t *testing.T) {
	base := func() *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "w-1", ResourceVersion: "10", Labels: map[string]string{}},
			Status: corev1.NodeStatus{
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
					LastHeartbeatTime: metav1.NewTime(time.Unix(100, 0)), LastTransitionTime: metav1.NewTime(time.Unix(50, 0))}},
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}},
				NodeInfo:  corev1.NodeSystemInfo{BootID: "boot-1"},
			},
		}
	}
	tests := []struct {
		name   string
		change func(*corev1.Node)
		want   bool
	}{
		{"nothing but the resource version", func(n *corev1.Node) { n.ResourceVersion = "11" }, false},
		{"a status heartbeat", func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Unix(160, 0))
		}, false},
		{"images", func(n *corev1.Node) { n.Status.Images = []corev1.ContainerImage{{Names: []string{"pause"}}} }, false},
		{"Ready goes Unknown", func(n *corev1.Node) {
			n.Status.Conditions[0].Status = corev1.ConditionUnknown
			n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Unix(170, 0))
		}, true},
		{"a new boot", func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" }, true},
		{"the out-of-service taint", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoExecute}}
			n.Annotations = map[string]string{taint.AnnotationAppliedBy: "cp-1"}
		}, true},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		{"excluded", func(n *corev1.Node) { n.Labels[taint.ExcludeLabel] = "true" }, true},
		{"becomes a control plane", func(n *corev1.Node) { n.Labels["node-role.kubernetes.io/control-plane"] = "" }, true},
		{"another InternalIP", func(n *corev1.Node) { n.Status.Addresses[0].Address = "198.18.0.2" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, n := base(), base()
			tt.change(n)
			if got := nodeChanged(old, n); got != tt.want {
				t.Errorf("nodeChanged = %v, want %v", got, tt.want)
			}
		})
	}
}
