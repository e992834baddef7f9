package fencing

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// reentrantMembers is a gossip view that calls the fencer's Notify from
// inside every call the fencer makes into it: the worst timing the ring's
// change handler (heartbeat.Ring.OnChange → Fencer.Notify, run with
// memberlist's node lock held) can have. A fencer that called into the
// ring with f.mu held would deadlock here at once; with the real ring it
// would deadlock only when a member changed at that moment (ring →
// fencer.mu → ring).
type reentrantMembers struct {
	stillMembers
	f     atomic.Pointer[Fencer]
	calls atomic.Int64
}

func (r *reentrantMembers) notify() {
	if f := r.f.Load(); f != nil {
		r.calls.Add(1)
		// The fencer's own name: its sync is a no-op, but Notify walks the
		// targets under f.mu as for any member.
		f.Notify("fencer")
	}
}

func (r *reentrantMembers) Member(name string) (heartbeat.Member, bool) {
	r.notify()
	return r.stillMembers.Member(name)
}

func (r *reentrantMembers) Alive() int {
	r.notify()
	return r.stillMembers.Alive()
}

func (r *reentrantMembers) Challenge(ctx context.Context, name, addr string) (heartbeat.Proof, error) {
	r.notify()
	return r.stillMembers.Challenge(ctx, name, addr)
}

// TestNotifyFromInsideTheRing: the fencer takes a dead node with a BMC
// that reads off all the way to the taint (observe, the write-time
// evidence check) while every read of the gossip view calls Notify
// re-entrantly. It must never hold f.mu while calling into the view.
func TestNotifyFromInsideTheRing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	victim := hostileNode("victim", "boot-1", "127.0.0.9", corev1.ConditionUnknown)
	client := fake.NewClientset(victim)
	members := &reentrantMembers{stillMembers: stillMembers{"victim": {Name: "victim", State: vocab.MemberDead, Since: time.Now()}}}
	b := newCountingBMC(vocab.PowerOff)
	f := startFencer(t, Config{
		Identity: "fencer", Client: client,
		Inventory: inventoryOf(map[string]device.BMC{"victim": b}, map[string]string{"victim": "test://victim"}),
		Members:   members,
		Tainter:   taint.NewTainter(client, "fencer", nil), Recorder: record.NewFakeRecorder(1000),
		Policy: testPolicy(vocab.ModeConfirmOnly), LeaseNamespace: hostileNS, Metrics: NewMetrics(prometheus.NewRegistry()),
		Logger: testLog(t, "fencer"),
	})
	members.f.Store(f)
	f.Notify("victim") // a sync after the pointer is set, whatever the informers did before

	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := client.CoreV1().Nodes().Get(context.Background(), "victim", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if taint.HasTaint(n) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no taint within 20 s after %d re-entrant notifications: is f.mu held around a call into the gossip view?", members.calls.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if members.calls.Load() == 0 {
		t.Fatal("the fencer never read the gossip view")
	}
}
