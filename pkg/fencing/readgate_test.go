package fencing

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// concurrencyProbe counts the power reads running at once across BMCs.
type concurrencyProbe struct{ now, max atomic.Int32 }

func (p *concurrencyProbe) enter() {
	n := p.now.Add(1)
	for {
		m := p.max.Load()
		if n <= m || p.max.CompareAndSwap(m, n) {
			return
		}
	}
}

func (p *concurrencyProbe) leave() { p.now.Add(-1) }

// probedBMC reads off after a short delay, or — dark — hangs until its
// request's context ends or the test releases it, as a BMC without power
// gives no answer at all.
type probedBMC struct {
	countingBMC
	probe *concurrencyProbe
	delay time.Duration
	dark  chan struct{} // nil: answers
}

func (b *probedBMC) PowerState(ctx context.Context) (vocab.PowerState, error) {
	b.probe.enter()
	defer b.probe.leave()
	if b.dark != nil {
		select {
		case <-b.dark:
		case <-ctx.Done():
		}
		return "", &device.Error{Kind: vocab.KindTimeout, Err: fmt.Errorf("no answer")}
	}
	time.Sleep(b.delay)
	return b.countingBMC.PowerState(ctx)
}

// TestPowerReadsBounded: a rack of nodes goes dark at once, some of their
// BMCs dark too. The fencer never has more reads in flight than
// maxConcurrentPowerReads (counted at the BMCs and by its gauge), every
// node whose BMC answers is read and tainted — the reads queued behind the
// bound are not lost — and the dark BMCs, hanging in their slots, hold up
// only those slots: the others are read through the rest.
func TestPowerReadsBounded(t *testing.T) {
	tests := []struct {
		name      string
		limit     int
		answering int
		dark      int
	}{
		{"one slot, all answer", 1, 12, 0},
		{"three slots, all answer", 3, 12, 0},
		{"three slots, one dark BMC", 3, 12, 1},
		{"three slots, two dark BMCs", 3, 12, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probe := &concurrencyProbe{}
			release := make(chan struct{})
			bmcs := map[string]device.BMC{}
			endpoints := map[string]string{}
			members := stillMembers{}
			var objs []runtime.Object
			var answering []string
			for i := range tt.answering + tt.dark {
				name := fmt.Sprintf("rack-%02d", i)
				b := &probedBMC{probe: probe, delay: 20 * time.Millisecond}
				b.power.Store(vocab.PowerOff)
				if i < tt.dark {
					b.dark = release
				} else {
					answering = append(answering, name)
				}
				bmcs[name], endpoints[name] = b, "test://"+name
				members[name] = heartbeat.Member{Name: name, State: vocab.MemberDead, Since: time.Now()}
				objs = append(objs, hostileNode(name, "boot-"+name, "127.0.0.9", corev1.ConditionUnknown))
			}
			client := fake.NewClientset(objs...)
			m := NewMetrics(prometheus.NewRegistry())
			var gaugeMax atomic.Int32
			stopWatch := make(chan struct{})
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for {
					if v := int32(testutil.ToFloat64(m.PowerReadsInFlight)); v > gaugeMax.Load() {
						gaugeMax.Store(v)
					}
					select {
					case <-stopWatch:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			t.Cleanup(func() { close(stopWatch); <-watched })
			// Released before the fencer stops (cleanups run last first).
			startFencer(t, Config{
				Identity: "fencer", Client: client,
				Inventory: inventoryOf(bmcs, endpoints), Members: members,
				Tainter: taint.NewTainter(client, "fencer", nil), Recorder: record.NewFakeRecorder(10000),
				Policy: testPolicy(vocab.ModeConfirmOnly), LeaseNamespace: hostileNS, MaxConcurrentPowerReads: tt.limit,
				Metrics: m, Logger: testLog(t, "fencer"),
			})
			t.Cleanup(func() { close(release) })

			deadline := time.Now().Add(30 * time.Second)
			for _, name := range answering {
				for !tainted(t, client, name) {
					if time.Now().After(deadline) {
						t.Fatalf("%s never tainted: its read was lost behind the bound (max in flight %d)", name, probe.max.Load())
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			for i := range tt.dark {
				if name := fmt.Sprintf("rack-%02d", i); tainted(t, client, name) {
					t.Errorf("%s tainted although its BMC never answered", name)
				}
			}
			if got := probe.max.Load(); got > int32(tt.limit) {
				t.Errorf("%d reads in flight at once at the BMCs, bound %d", got, tt.limit)
			}
			if got := gaugeMax.Load(); got > int32(tt.limit) {
				t.Errorf("fenced_power_reads_in_flight reached %d, bound %d", got, tt.limit)
			}
			if tt.limit > 1 && probe.max.Load() < 2 {
				t.Errorf("reads never overlapped (max %d): the bound serialises more than it should", probe.max.Load())
			}
		})
	}
}

// TestReadGateOrder: reads queued behind a full gate get their slots in
// the order they asked, and one whose context ends leaves without a slot.
func TestReadGateOrder(t *testing.T) {
	g := newReadGate(1, NewMetrics(prometheus.NewRegistry()))
	ctx := context.Background()
	if !g.acquire(ctx, readGossipOnly) {
		t.Fatal("first acquire failed")
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			if g.acquire(ctx, readGossipOnly) {
				order <- i
				g.release()
			}
		}()
		// Let each one block before the next comes.
		for testutil.ToFloat64(g.waiting) != float64(i+1) {
			time.Sleep(time.Millisecond)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if g.acquire(cancelled, readGossipOnly) {
		t.Fatal("acquire with an ended context took a slot from a full gate")
	}
	g.release()
	for want := range 3 {
		if got := <-order; got != want {
			t.Fatalf("slot %d went to waiter %d", want, got)
		}
	}
	if v := testutil.ToFloat64(g.inFlight); v != 0 {
		t.Errorf("in flight %v after all released", v)
	}
}

// TestReadGatePriority: behind a full gate, waiting reads of nodes that
// Kubernetes sees NotReady get their slots before every waiting
// gossip-only read, each class in the order it came; a waiter whose
// context ends leaves its place without taking a slot; gossip-only reads
// run once no priority read waits.
func TestReadGatePriority(t *testing.T) {
	tests := []struct {
		name    string
		arrive  []readClass // after one slot is taken
		cancel  int         // index of a waiter whose context ends while it waits; -1: none
		granted []int       // indexes of arrive, in the order they get slots
	}{
		{"priority overtakes gossip-only", []readClass{readGossipOnly, readGossipOnly, readPriority}, -1, []int{2, 0, 1}},
		{"FIFO within each class", []readClass{readGossipOnly, readPriority, readGossipOnly, readPriority, readGossipOnly}, -1, []int{1, 3, 0, 2, 4}},
		{"gossip-only alone, in order", []readClass{readGossipOnly, readGossipOnly, readGossipOnly}, -1, []int{0, 1, 2}},
		{"a cancelled priority waiter leaves", []readClass{readGossipOnly, readPriority, readPriority}, 1, []int{2, 0}},
		{"a cancelled gossip-only waiter leaves", []readClass{readGossipOnly, readGossipOnly, readPriority}, 0, []int{2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newReadGate(1, NewMetrics(prometheus.NewRegistry()))
			ctx := context.Background()
			if !g.acquire(ctx, readGossipOnly) {
				t.Fatal("first acquire failed")
			}
			order := make(chan int, len(tt.arrive))
			left := make(chan struct{})
			var stop context.CancelFunc
			for i, class := range tt.arrive {
				wctx := ctx
				if i == tt.cancel {
					wctx, stop = context.WithCancel(ctx)
				}
				go func() {
					if !g.acquire(wctx, class) {
						close(left)
						return
					}
					order <- i
					g.release()
				}()
				// Let each one queue before the next comes.
				waitGauge(t, g.waiting, float64(i+1))
			}
			if stop != nil {
				stop()
				<-left
				waitGauge(t, g.waiting, float64(len(tt.arrive)-1))
			}
			g.release()
			for _, want := range tt.granted {
				if got := <-order; got != want {
					t.Fatalf("slot went to waiter %d (%s), want %d (%s)", got, tt.arrive[got], want, tt.arrive[want])
				}
			}
			waitGauge(t, g.inFlight, 0)
			deadline := time.Now().Add(10 * time.Second)
			for held := 1; held != 0; {
				g.mu.Lock()
				held = g.held
				g.mu.Unlock()
				if held != 0 && time.Now().After(deadline) {
					t.Fatalf("%d slots held after all released", held)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// startLog records which BMCs' reads began, in order.
type startLog struct {
	mu    sync.Mutex
	names []string
}

func (l *startLog) add(name string) { l.mu.Lock(); l.names = append(l.names, name); l.mu.Unlock() }

func (l *startLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.names)
}

// loggedBMC records the start of each read, then answers after delay.
type loggedBMC struct {
	countingBMC
	name  string
	log   *startLog
	delay time.Duration
}

func (b *loggedBMC) PowerState(ctx context.Context) (vocab.PowerState, error) {
	b.log.add(b.name)
	select {
	case <-time.After(b.delay):
	case <-ctx.Done():
	}
	return b.countingBMC.PowerState(ctx)
}

// TestRealFenceNotBehindGossipSuspects: gossip alone says a crowd of nodes
// is dead (forged, or a false mass death) while Kubernetes sees them
// Ready; their BMCs are slow and read on. One read slot. Then a node
// really dies: Kubernetes sees it NotReady. Its read goes before every
// gossip-only read still waiting, so at most the one in flight (and one
// granted while its read was being queued) runs first. The delay to its
// taint is logged for the record, not asserted.
func TestRealFenceNotBehindGossipSuspects(t *testing.T) {
	const suspects, slow = 6, time.Second
	log := &startLog{}
	bmcs := map[string]device.BMC{}
	endpoints := map[string]string{}
	members := stillMembers{}
	var objs []runtime.Object
	for i := range suspects {
		name := fmt.Sprintf("alive-%02d", i)
		b := &loggedBMC{name: name, log: log, delay: slow}
		b.power.Store(vocab.PowerOn)
		bmcs[name], endpoints[name] = b, "test://"+name
		members[name] = heartbeat.Member{Name: name, State: vocab.MemberDead, Since: time.Now().Add(-10 * time.Minute)}
		objs = append(objs, hostileNode(name, "boot-"+name, "127.0.0.9", corev1.ConditionTrue))
	}
	const victim = "dead-node"
	vb := &loggedBMC{name: victim, log: log}
	vb.power.Store(vocab.PowerOff)
	bmcs[victim], endpoints[victim] = vb, "test://"+victim
	objs = append(objs, hostileNode(victim, "boot-"+victim, "127.0.0.9", corev1.ConditionTrue))
	client := fake.NewClientset(objs...)
	m := NewMetrics(prometheus.NewRegistry())
	startFencer(t, Config{
		Identity: "fencer", Client: client,
		Inventory: inventoryOf(bmcs, endpoints), Members: members,
		Tainter: taint.NewTainter(client, "fencer", nil), Recorder: record.NewFakeRecorder(10000),
		Policy: testPolicy(vocab.ModeConfirmOnly), LeaseNamespace: hostileNS, MaxConcurrentPowerReads: 1,
		Metrics: m, Logger: testLog(t, "fencer"),
	})
	// Every gossip suspect's read is in flight or waiting.
	waitGauge(t, m.PowerReadsWaiting, suspects-1)

	n, err := client.CoreV1().Nodes().Get(context.Background(), victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions[0].Status = corev1.ConditionUnknown
	if _, err := client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	died := time.Now()
	before := len(log.snapshot())
	deadline := died.Add(time.Duration(suspects+10) * slow)
	for !tainted(t, client, victim) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never tainted; reads began in this order: %v", victim, log.snapshot())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%s tainted %v after Kubernetes saw it NotReady, behind %d gossip-only suspects with %v BMCs and 1 read slot",
		victim, time.Since(died).Round(10*time.Millisecond), suspects, slow)
	started := log.snapshot()[before:]
	ahead := slices.Index(started, victim)
	if ahead < 0 {
		t.Fatalf("%s tainted without a read of its own: %v", victim, started)
	}
	if ahead > 1 {
		t.Errorf("%d gossip-only reads began before the NotReady node's (%v): it waited behind them", ahead, started[:ahead])
	}
}

// waitGauge waits until gauge reads want.
func waitGauge(t *testing.T, gauge prometheus.Gauge, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(gauge) != want {
		if time.Now().After(deadline) {
			t.Fatalf("gauge at %v, want %v", testutil.ToFloat64(gauge), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// tainted reports whether node carries the out-of-service taint with
// evidence.
func tainted(t *testing.T, client *fake.Clientset, node string) bool {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ok, _ := taint.EvidenceOf(n)
	return ok && taint.HasTaint(n)
}
