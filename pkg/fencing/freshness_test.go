package fencing

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// stillMembers is a gossip view with fixed members and no agent answers.
type stillMembers map[string]heartbeat.Member

func (s stillMembers) Member(name string) (heartbeat.Member, bool) { m, ok := s[name]; return m, ok }
func (s stillMembers) Alive() int                                  { return len(s) }
func (s stillMembers) Challenge(ctx context.Context, name, addr string) (heartbeat.Proof, error) {
	<-ctx.Done()
	return heartbeat.Proof{}, heartbeat.ErrNoProof
}

// slowBMC answers "off" after a delay.
type slowBMC struct {
	countingBMC
	delay time.Duration
}

func (b *slowBMC) PowerState(ctx context.Context) (vocab.PowerState, error) {
	time.Sleep(b.delay)
	return b.countingBMC.PowerState(ctx)
}

func kubeletLease(node string, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: KubeletLeaseNamespace},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renew}}}
}

// runFencer starts a fencer in confirm-only mode for node "victim"
// (NotReady, dead in gossip) whose BMC is b.
func runFencer(t *testing.T, b device.BMC, objs ...runtime.Object) (*Fencer, *fake.Clientset) {
	t.Helper()
	return runFencerWith(t, testPolicy(vocab.ModeConfirmOnly), b, objs...)
}

// runFencerWith is runFencer with policy p.
func runFencerWith(t *testing.T, p core.Policy, b device.BMC, objs ...runtime.Object) (*Fencer, *fake.Clientset) {
	t.Helper()
	victim := hostileNode("victim", "boot-1", "127.0.0.9", corev1.ConditionUnknown)
	client := fake.NewClientset(append(objs, victim)...)
	f := startFencer(t, Config{
		Identity: "fencer", Client: client,
		Inventory: inventoryOf(map[string]device.BMC{"victim": b}, map[string]string{"victim": "test://victim"}),
		Members:   stillMembers{"victim": {Name: "victim", State: vocab.MemberDead, Since: time.Now()}},
		Tainter:   taint.NewTainter(client, "fencer", nil), Recorder: record.NewFakeRecorder(1000),
		Policy: p, LeaseNamespace: hostileNS, Metrics: NewMetrics(prometheus.NewRegistry()), Logger: testLog(t, "fencer"),
	})
	return f, client
}

// waitTaintEvidence waits (20 s at most) for the victim's taint and
// returns its evidence; it fails the test with notTainted otherwise.
func waitTaintEvidence(t *testing.T, client kubernetes.Interface, notTainted string) core.Evidence {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := client.CoreV1().Nodes().Get(context.Background(), "victim", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ev, ok, _ := taint.EvidenceOf(n); ok && taint.HasTaint(n) {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatal(notTainted)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEvidenceIsDatedWithTheAnswer: a BMC that answers late gives evidence
// dated when the answer came, with the request's time beside it.
func TestEvidenceIsDatedWithTheAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	b := &slowBMC{delay: 1500 * time.Millisecond}
	b.power.Store(vocab.PowerOff)
	_, client := runFencer(t, b)
	ev := waitTaintEvidence(t, client, "no taint")
	if ev.BMC == nil || ev.BMC.SentAt.IsZero() || ev.BMC.At.Sub(ev.BMC.SentAt) < b.delay {
		t.Fatalf("reading sent %s, answered %s: want the answer's time, %s after the request", ev.BMC.SentAt, ev.BMC.At, b.delay)
	}
}

// TestWriteTimeCheckUsesTheFreshestView: right before the write, the
// kubelet's Lease is read from the API, not from the informer: a renewal
// after the reading stops the write.
func TestWriteTimeCheckUsesTheFreshestView(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	reading := time.Now()
	b := newCountingBMC(vocab.PowerOff)
	f, client := runFencer(t, b, kubeletLease("victim", reading.Add(-5*time.Second)))
	ev := &core.Evidence{Method: vocab.EvidenceBMCPowerOff, At: reading, BootID: "boot-1",
		BMC: &core.Reading{Power: vocab.PowerOff, At: reading, KubeletLeaseRenewedAt: reading.Add(-5 * time.Second)}}
	n, err := client.CoreV1().Nodes().Get(context.Background(), "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check := f.evidenceCheck(context.Background(), "victim", ev)
	if err := check(n); err != nil {
		t.Fatalf("no sign of life yet: %v", err)
	}
	// The kubelet renews its Lease after the reading: the informer may not
	// have it yet, the API has.
	if _, err := client.CoordinationV1().Leases(KubeletLeaseNamespace).Update(context.Background(),
		kubeletLease("victim", reading.Add(time.Second)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := check(n); !errors.Is(err, ErrEvidenceVoided) {
		t.Fatalf("kubelet renewed after the reading: %v", err)
	}
	// A new boot in the Node as just read.
	n.Status.NodeInfo.BootID = "boot-2"
	if err := f.evidenceCheck(context.Background(), "victim", &core.Evidence{Method: vocab.EvidenceBMCPowerOff, At: reading, BootID: "boot-1",
		BMC: &core.Reading{Power: vocab.PowerOff, At: reading, KubeletLeaseRenewedAt: reading.Add(time.Minute)}})(n); !errors.Is(err, ErrEvidenceVoided) {
		t.Fatalf("new boot: %v", err)
	}
}

// TestLaggingInformerIsNoSignOfLife: after an API outage the fencer's
// informers can lag the API server by a minute. A kubelet renewal from
// before the power reading that the informer had not yet seen is no sign
// of life after it: the reading's baseline comes from the API server, so
// the node is tainted and no contradiction is raised. (Found on the
// harness: the baseline came from the lagging informer, the write-time
// check read the newer renewal from the API, voided the reading as
// "renewed after the reading", raised PowerReadingContradicted, and held
// the fence back 77 s.)
func TestLaggingInformerIsNoSignOfLife(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fencer")
	}
	now := time.Now()
	victim := hostileNode("victim", "boot-1", "127.0.0.9", corev1.ConditionUnknown)
	// The API server has the kubelet's last renewal (15 s ago, before it
	// lost power); the informer still has the one before it.
	api := fake.NewClientset(victim, kubeletLease("victim", now.Add(-15*time.Second)))
	lagging := fake.NewClientset(victim.DeepCopy(), kubeletLease("victim", now.Add(-25*time.Second)))
	recorder := record.NewFakeRecorder(1000)
	startFencerWatching(t, Config{
		Identity: "fencer", Client: api,
		Inventory: inventoryOf(map[string]device.BMC{"victim": newCountingBMC(vocab.PowerOff)}, map[string]string{"victim": "test://victim"}),
		Members:   stillMembers{"victim": {Name: "victim", State: vocab.MemberDead, Since: now}},
		Tainter:   taint.NewTainter(api, "fencer", nil), Recorder: recorder,
		Policy: testPolicy(vocab.ModeConfirmOnly), LeaseNamespace: hostileNS, Metrics: NewMetrics(prometheus.NewRegistry()), Logger: testLog(t, "fencer"),
	}, lagging)
	ev := waitTaintEvidence(t, api, "not tainted: the renewal the informer had not seen was taken for a sign of life")
	if ev.BMC == nil || !ev.BMC.KubeletLeaseRenewedAt.Equal(now.Add(-15*time.Second)) {
		t.Fatalf("evidence %+v: want the reading stamped with the API server's renewal (%s)", ev.BMC, now.Add(-15*time.Second))
	}
	for len(recorder.Events) > 0 {
		if e := <-recorder.Events; strings.Contains(e, string(vocab.EventPowerReadingContradicted)) {
			t.Fatalf("a contradiction was raised: %s", e)
		}
	}
}
