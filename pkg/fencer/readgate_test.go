package fencer

import (
	"context"
	"fmt"
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

	"fenced.io/fenced/pkg/core"
	"fenced.io/fenced/pkg/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/kube"
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

func (b *probedBMC) PowerState(ctx context.Context) (core.PowerState, error) {
	b.probe.enter()
	defer b.probe.leave()
	if b.dark != nil {
		select {
		case <-b.dark:
		case <-ctx.Done():
		}
		return "", &device.Error{Kind: core.KindTimeout, Err: fmt.Errorf("no answer")}
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
				b.power.Store(core.PowerOff)
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
				Inventory: device.NewInventoryOf(bmcs, endpoints), Members: members,
				Tainter: kube.NewTainter(client, "fencer", nil), Recorder: record.NewFakeRecorder(10000),
				Policy: testPolicy(core.ModeConfirmOnly), LeaseNamespace: hostileNS, MaxConcurrentPowerReads: tt.limit,
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
	if !g.acquire(ctx) {
		t.Fatal("first acquire failed")
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			if g.acquire(ctx) {
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
	if g.acquire(cancelled) {
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

// tainted reports whether node carries the out-of-service taint with
// evidence.
func tainted(t *testing.T, client *fake.Clientset, node string) bool {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ok, _ := kube.EvidenceOf(n)
	return ok && kube.HasTaint(n)
}
