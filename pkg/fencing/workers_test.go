package fencing

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestObserveCountsWhatOtherDecisionsReserved: a decision sees what the
// decisions of other nodes decided and their workers are still writing —
// a power Lease being acquired, a taint being written — as done, in each
// cluster-wide guard that counts it; its own node's reservations are not
// counted, and a reservation ended counts no more.
func TestObserveCountsWhatOtherDecisionsReserved(t *testing.T) {
	cp := hostileNode("cp-2", "boot-cp", "127.0.0.4", corev1.ConditionTrue)
	cp.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
	client := fake.NewClientset(hostileNode("victim", "boot-1", "127.0.0.9", corev1.ConditionUnknown),
		hostileNode("fencer", "boot-f", "127.0.0.1", corev1.ConditionTrue),
		hostileNode("worker", "boot-w", "127.0.0.2", corev1.ConditionTrue), cp)
	members := stillMembers{}
	for _, n := range []string{"victim", "fencer", "worker", "cp-2"} {
		members[n] = heartbeat.Member{Name: n, State: vocab.MemberAlive}
	}
	f := newSyncedFencer(t, Config{
		Identity: "fencer", Client: client, Inventory: inventoryOf(nil, nil), Members: members,
		Tainter: taint.NewTainter(client, "fencer", nil), Recorder: record.NewFakeRecorder(100),
		Policy: testPolicy(vocab.ModePowerOff), LeaseNamespace: hostileNS, Logger: testLog(t, "fencer"),
	})
	// The victim is NotReady: one unhealthy node before any reservation.
	const unhealthy = 1

	type counts struct{ powerActions, controlPlaneDown, cleanShutdownFences, unhealthy int }
	tests := []struct {
		name    string
		node    string
		reserve func(*nodeState)
		want    counts
	}{
		{"nothing reserved", "worker", func(*nodeState) {}, counts{unhealthy: unhealthy}},
		{"a Lease being acquired", "worker", func(s *nodeState) { s.acquiring = true }, counts{powerActions: 1, unhealthy: unhealthy}},
		{"a Lease held (renewed)", "worker", func(s *nodeState) { s.renew = func() {} }, counts{powerActions: 1, unhealthy: unhealthy}},
		{"a control-plane node's Lease being acquired", "cp-2", func(s *nodeState) { s.acquiring = true },
			counts{powerActions: 1, controlPlaneDown: 1, unhealthy: unhealthy}},
		{"a taint on a power reading being written", "worker", func(s *nodeState) { s.taintPending = vocab.EvidenceBMCPowerOff },
			counts{unhealthy: unhealthy + 1}},
		{"a taint on a clean-shutdown word being written", "worker", func(s *nodeState) { s.taintPending = vocab.EvidenceCleanShutdown },
			counts{cleanShutdownFences: 1, unhealthy: unhealthy + 1}},
		{"a control-plane node's taint being written", "cp-2", func(s *nodeState) { s.taintPending = vocab.EvidenceBMCPowerOff },
			counts{controlPlaneDown: 1, unhealthy: unhealthy + 1}},
		{"the decided node's own reservations", "victim", func(s *nodeState) {
			s.acquiring, s.taintPending = true, vocab.EvidenceCleanShutdown
		}, counts{unhealthy: unhealthy}},
	}
	observe := func(t *testing.T) counts {
		t.Helper()
		o, _, err := f.observe("victim", f.settings())
		if err != nil {
			t.Fatal(err)
		}
		c := o.Cluster
		return counts{c.PowerActions, c.ControlPlaneDown, c.CleanShutdownFences, c.Unhealthy}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.mu.Lock()
			tt.reserve(f.stateOf(tt.node))
			f.mu.Unlock()
			if got := observe(t); got != tt.want {
				t.Errorf("reserved: %+v, want %+v", got, tt.want)
			}
			f.unreserve(tt.node)
			f.mu.Lock()
			f.stateOf(tt.node).renew = nil
			f.mu.Unlock()
			if got, want := observe(t), (counts{unhealthy: unhealthy}); got != want {
				t.Errorf("after unreserve: %+v, want %+v", got, want)
			}
		})
	}

	// A fence order standing for a control-plane node's boot: its watchdog
	// is resetting it, so it is down, though the order's Lease went back;
	// an order for an earlier boot is not.
	for _, tc := range []struct {
		boot string
		want counts
	}{
		{"boot-cp", counts{controlPlaneDown: 1, unhealthy: unhealthy}},
		{"boot-earlier", counts{unhealthy: unhealthy}},
	} {
		t.Run("a control-plane node ordered to reset, boot "+tc.boot, func(t *testing.T) {
			if err := publish.WriteOrder(t.Context(), client, hostileNS, "cp-2", tc.boot, "fencer"); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, 10*time.Second, "the order in the fencer's informer", func() bool { return f.orderedName("cp-2") })
			if got := observe(t); got != tc.want {
				t.Errorf("with the order: %+v, want %+v", got, tc.want)
			}
			if err := client.CoordinationV1().Leases(hostileNS).Delete(t.Context(), publish.OrderLeaseName("cp-2"), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, 10*time.Second, "the order gone from the fencer's informer", func() bool { return !f.orderedName("cp-2") })
		})
	}
}

// orderedName reports whether the fencer's informer holds node's fence
// order, for any boot.
func (f *Fencer) orderedName(node string) bool {
	_, err := f.leases.Get(publish.OrderLeaseName(node))
	return err == nil
}

// slowWrites is a clientset whose Node updates and Lease creates take
// delay each, outside the fake's lock (its reactors run under one lock
// for every call, so a slow reactor would make every call wait in line):
// writes of several workers overlap as they do on a real API server. It
// counts the writes in flight at once.
type slowWrites struct {
	*fake.Clientset
	delay time.Duration

	mu                    sync.Mutex
	updating, maxUpdating int
}

func (c *slowWrites) CoreV1() typedcorev1.CoreV1Interface {
	return slowCore{c.Clientset.CoreV1(), c}
}

func (c *slowWrites) CoordinationV1() typedcoordinationv1.CoordinationV1Interface {
	return slowCoordination{c.Clientset.CoordinationV1(), c}
}

// write runs one slow write, counted while it runs.
func (c *slowWrites) write(do func() error) error {
	c.mu.Lock()
	c.updating++
	c.maxUpdating = max(c.maxUpdating, c.updating)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.updating--
		c.mu.Unlock()
	}()
	time.Sleep(c.delay)
	return do()
}

func (c *slowWrites) overlapped() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxUpdating
}

type slowCore struct {
	typedcorev1.CoreV1Interface
	c *slowWrites
}

func (s slowCore) Nodes() typedcorev1.NodeInterface { return slowNodes{s.CoreV1Interface.Nodes(), s.c} }

type slowNodes struct {
	typedcorev1.NodeInterface
	c *slowWrites
}

func (s slowNodes) Update(ctx context.Context, n *corev1.Node, opts metav1.UpdateOptions) (out *corev1.Node, err error) {
	err = s.c.write(func() error { out, err = s.NodeInterface.Update(ctx, n, opts); return err })
	return out, err
}

type slowCoordination struct {
	typedcoordinationv1.CoordinationV1Interface
	c *slowWrites
}

func (s slowCoordination) Leases(ns string) typedcoordinationv1.LeaseInterface {
	return slowLeases{s.CoordinationV1Interface.Leases(ns), s.c}
}

type slowLeases struct {
	typedcoordinationv1.LeaseInterface
	c *slowWrites
}

func (s slowLeases) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (out *coordinationv1.Lease, err error) {
	err = s.c.write(func() error { out, err = s.LeaseInterface.Create(ctx, l, opts); return err })
	return out, err
}

var _ kubernetes.Interface = (*slowWrites)(nil)

// parallelBed runs a fencer with Workers workers on a cluster of healthy
// nodes and len(bmcs) NotReady nodes, dead in gossip, named down-0, …,
// whose writes take delay each.
func parallelBed(t *testing.T, workers int, p vocab.Mode, power vocab.PowerState, down, healthy int, delay time.Duration) (*slowWrites, map[string]*countingBMC) {
	t.Helper()
	var objs []runtime.Object
	members := stillMembers{}
	bmcs, devs, endpoints := map[string]*countingBMC{}, map[string]device.BMC{}, map[string]string{}
	for i := range down {
		name := fmt.Sprintf("down-%d", i)
		objs = append(objs, hostileNode(name, "boot-"+name, fmt.Sprintf("127.0.1.%d", i+1), corev1.ConditionUnknown))
		members[name] = heartbeat.Member{Name: name, State: vocab.MemberDead, Since: time.Now()}
		bmcs[name] = newCountingBMC(power)
		devs[name], endpoints[name] = bmcs[name], "test://"+name
	}
	for i := range healthy {
		name := fmt.Sprintf("up-%d", i)
		if i == 0 {
			name = "fencer"
		}
		objs = append(objs, hostileNode(name, "boot-"+name, fmt.Sprintf("127.0.2.%d", i+1), corev1.ConditionTrue))
		members[name] = heartbeat.Member{Name: name, State: vocab.MemberAlive}
	}
	client := &slowWrites{Clientset: fake.NewClientset(objs...), delay: delay}
	pol := testPolicy(p)
	pol.FenceAfter, pol.FenceDelay, pol.ChallengeInterval = time.Second, time.Second, time.Second
	startFencer(t, Config{
		Identity: "fencer", Client: client, Workers: workers,
		Inventory: inventoryOf(devs, endpoints), Members: members,
		Tainter: taint.NewTainter(client, "fencer", nil), Recorder: record.NewFakeRecorder(10000),
		Policy: pol, LeaseNamespace: hostileNS, Metrics: NewMetrics(prometheus.NewRegistry()), Logger: testLog(t, "fencer"),
		ChallengeTimeout: 100 * time.Millisecond,
	})
	return client, bmcs
}

// taintedNodes counts the Nodes that carry the out-of-service taint.
func taintedNodes(t *testing.T, client kubernetes.Interface) int {
	t.Helper()
	nodes, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range nodes.Items {
		if taint.HasTaint(&nodes.Items[i]) {
			n++
		}
	}
	return n
}

// TestFencesAreWrittenSideBySide: the power of a rack's nodes reads off at
// once, and their taints are written side by side, not one after another
// (each write here takes half a second, as three round trips can on a busy
// API server).
func TestFencesAreWrittenSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	const down = 6
	client, _ := parallelBed(t, DefaultWorkers, vocab.ModeConfirmOnly, vocab.PowerOff, down, 8, 500*time.Millisecond)
	poll.Until(t, time.Minute, "every node whose power reads off tainted", func() bool { return taintedNodes(t, client) == down })
	if got := client.overlapped(); got < 2 {
		t.Errorf("at most %d taint write(s) at once, want them side by side (%d workers)", got, DefaultWorkers)
	}
}

// TestParallelWorkersKeepMaxConcurrentPowerActions: in power-off mode,
// three hung nodes are switched off with maxConcurrentPowerActions 1 by a
// fencer whose workers run side by side and whose Lease writes are slow:
// one power Lease at a time all the same — a decision counts the Lease
// another worker is still acquiring (without that, every worker took one).
func TestParallelWorkersKeepMaxConcurrentPowerActions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	const down = 3
	client, bmcs := parallelBed(t, DefaultWorkers, vocab.ModePowerOff, vocab.PowerOn, down, 8, 300*time.Millisecond)
	var most atomic.Int32
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			leases, err := client.Clientset.CoordinationV1().Leases(hostileNS).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				continue
			}
			held := int32(0)
			for _, l := range leases.Items {
				if strings.HasPrefix(l.Name, LeasePrefix) {
					held++
				}
			}
			if held > most.Load() {
				most.Store(held)
			}
		}
	}()
	poll.Until(t, 2*time.Minute, "every hung node switched off and tainted", func() bool { return taintedNodes(t, client) == down })
	close(stop)
	<-done
	for name, b := range bmcs {
		if n := b.powerOffs.Load(); n != 1 {
			t.Errorf("%s switched off %d times, want once", name, n)
		}
	}
	if m := most.Load(); m > 1 {
		t.Errorf("%d power Leases held at once, want at most maxConcurrentPowerActions 1", m)
	}
}
