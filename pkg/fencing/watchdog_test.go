package fencing

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// watchdogOnly is an inventory of no power devices whose every node ends
// in a watchdog level, its first.
type watchdogOnly struct{ Inventory }

func (watchdogOnly) WatchdogLevel(string) int { return 1 }

// TestWatchdogLevelOnRealRings runs a fencer, real gossip rings and
// liveness challenges, on nodes with no power device and a watchdog level.
// Four nodes lose their power at once, among five that run on: "armed"
// stated its watchdog, signed with its key, and is ordered and tainted with
// watchdog evidence once the wait has passed since the fencer saw the
// order; "back" is ordered too but answers again in the same boot during
// the wait: no taint; "unarmed" never stated one and "forged" carries a
// statement signed with another key (what any other key holder could
// sign): neither is ever ordered or tainted.
func TestWatchdogLevelOnRealRings(t *testing.T) {
	if testing.Short() {
		t.Skip("real gossip rings")
	}
	p := testPolicy(vocab.ModeConfirmOnly)
	p.WatchdogOrderAfter, p.ChallengeInterval = time.Second, 500*time.Millisecond // maxConcurrentPowerActions 1: the orders one after the other
	b := newHostileBed(t, p, "armed", "back", "unarmed", "forged", "up-1", "up-2", "up-3", "up-4")
	<-b.fencer.Reconfigure(Settings{Inventory: watchdogOnly{inventoryOf(nil, nil)}, Policy: p})
	b.waitFor(20*time.Second, "the fence orders' policy in force", b.fencer.orderPolicyOK.Load)
	ctx := t.Context()
	// W 1 s, T 2 s: a wait of 3 × 1.01/0.99 + 2 = 5.06 s.
	arm := identity.Armed{Timeout: time.Second, Confirm: 2 * time.Second, Device: "i6300ESB timer"}
	for _, name := range []string{"armed", "back"} {
		v := b.victims[name]
		if err := publish.PublishArmed(ctx, b.client, hostileNS, name, v.boot, v.key, arm); err != nil {
			t.Fatal(err)
		}
	}
	other, _ := identity.NewKey()
	if err := publish.PublishArmed(ctx, b.client, hostileNS, "forged", b.victims["forged"].boot, other, arm); err != nil {
		t.Fatal(err)
	}
	b.waitFor(20*time.Second, "the armed statements seen", func() bool {
		return b.fencer.watchdogObs("armed", 1, time.Now(), time.Time{}).Arm != nil &&
			strings.Contains(b.fencer.watchdogObs("forged", 1, time.Now(), time.Time{}).Refused, "signature")
	})

	lost := time.Now()
	for _, name := range []string{"armed", "back", "unarmed", "forged"} {
		b.victims[name].ring.Shutdown()
	}
	order := func(name string) (publish.Order, bool) {
		o, found, err := publish.ReadOrder(ctx, b.client, hostileNS, name)
		if err != nil {
			t.Fatal(err)
		}
		return o, found
	}
	b.waitFor(30*time.Second, "fence orders for armed and back", func() bool {
		a, okA := order("armed")
		k, okK := order("back")
		return okA && okK && a.BootID == "boot-armed" && k.BootID == "boot-back" && a.By == "fencer"
	})
	ordered := time.Since(lost)
	t.Logf("ordered %s after the power loss", ordered.Round(time.Millisecond))

	// back answers again, in the same boot, while its wait runs.
	v := b.victims["back"]
	v.ring = b.join("back", v.boot, v.ip, v.key, b.isNode)

	b.waitFor(30*time.Second, "armed tainted", func() bool { return slices.Contains(b.tainted(), "armed") })
	n, err := b.client.CoreV1().Nodes().Get(ctx, "armed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev, ok, err := taint.EvidenceOf(n)
	if !ok || err != nil || ev.Method != vocab.EvidenceWatchdog || ev.Watchdog == nil || ev.BootID != "boot-armed" {
		t.Fatalf("evidence %+v (%v, %v)", ev, ok, err)
	}
	if w := ev.Watchdog; ev.At.Sub(w.OrderSeenAt) < time.Duration(w.Wait) || w.OrderSeenAt.Before(lost) || time.Duration(w.Timeout) != time.Second ||
		time.Duration(w.Confirm) != 2*time.Second || w.Device != "i6300ESB timer" {
		t.Fatalf("evidence taken at %s on %+v: before the wait ended, or not what the node stated", ev.At, w)
	}
	t.Logf("armed: tainted %s after the power loss: %s", ev.At.Sub(lost).Round(time.Millisecond), ev.Summary())

	// The others: nothing, for as long again as armed's whole fence took.
	deadline := time.Now().Add(time.Since(lost))
	for time.Now().Before(deadline) {
		for _, name := range []string{"back", "unarmed", "forged"} {
			if slices.Contains(b.tainted(), name) {
				t.Fatalf("%s tainted", name)
			}
		}
		for _, name := range []string{"unarmed", "forged"} {
			if _, found := order(name); found {
				t.Fatalf("%s ordered to reset without a statement of its own", name)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := b.fencer.watchdogObs("unarmed", 1, time.Now(), time.Time{}); got.Arm != nil || got.Refused != "" {
		t.Errorf("unarmed: %+v", got)
	}

	// Back in another boot (its kubelet reports it): the order is withdrawn.
	n, err = b.client.CoreV1().Nodes().Get(ctx, "back", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.NodeInfo.BootID = "boot-back-2"
	if _, err := b.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitFor(30*time.Second, "back's order withdrawn", func() bool {
		_, found := order("back")
		return !found
	})
}
