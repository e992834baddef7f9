package fencing

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// TestStaleKeyReplayCannotTaint is the stale-key replay at the fencer's
// level (real rings, the real fencer and tainter, the key Lease on a fake
// API): a node's earlier run signed shutdown-complete and a leave notice
// with the key still on its Lease, but the host stayed up in the same boot
// (its shutdown was cancelled after the leave), and the new run's key is
// not on the Lease yet. The attacker replays the old run's genuine words:
// no taint, the rejection counted. Once the new run's key is on the Lease,
// that run's own clean shutdown counts again.
func TestStaleKeyReplayCannotTaint(t *testing.T) {
	if testing.Short() {
		t.Skip("real gossip rings")
	}
	for _, tc := range []struct {
		name string
		// signsEarly: the new run signs with its key before the key is on
		// the Lease, as agents before this change did; otherwise it signs
		// nothing until then (Ring.UseKey once published).
		signsEarly bool
	}{
		{name: "new run signs nothing until its key is published"},
		{name: "new run signs with its unpublished key", signsEarly: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHostileBed(t, testPolicy(vocab.ModeConfirmOnly), "victim")
			v := b.victims["victim"]

			// The old run's last words, signed with the key on the Lease as
			// Ring.Announce and Ring.Leave sign them: the attacker, a ring
			// member, received them when that run shut down.
			oldMeta := metaFor(t, v, vocab.AnnounceShutdownComplete, v.boot, v.key, 1000)
			oldLeave := signedNotice(v.key, v.name, v.boot, 1001)

			// The old run leaves; the host stays up in the same boot and a
			// new run joins, its key not yet on the Lease.
			if err := v.ring.Leave(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			b.waitFor(10*time.Second, "the fencer sees the old run left", func() bool {
				m, _ := b.ring.Member(v.name)
				return m.State == vocab.MemberLeft
			})
			newKey, err := identity.NewKey()
			if err != nil {
				t.Fatal(err)
			}
			var signing *identity.Key
			if tc.signsEarly {
				signing = newKey
			}
			v.ring = b.join(v.name, v.boot, v.ip, signing, b.isNode)
			b.waitFor(20*time.Second, "the fencer sees the new run alive", func() bool {
				m, _ := b.ring.Member(v.name)
				return m.State == vocab.MemberAlive
			})
			b.waitFor(10*time.Second, "the fencer looked at the new run", func() bool { return b.fencer.queue.Len() == 0 })
			b.assertNoHarm(time.Second)

			before := b.forgeries(forgedStaleKey)
			b.cleanShutdownBurst(v, oldMeta, 5000, oldLeave)
			b.assertNoHarm(5 * time.Second)
			if b.forgeries(forgedStaleKey) <= before {
				t.Fatalf("fenced_gossip_forgeries_total{kind=%q} did not grow", forgedStaleKey)
			}

			// The new run's key lands: its own clean shutdown counts.
			if err := publish.Publish(t.Context(), b.client, hostileNS, v.name, v.boot, newKey.Public(), time.Now()); err != nil {
				t.Fatal(err)
			}
			if !tc.signsEarly {
				if err := v.ring.UseKey(newKey); err != nil {
					t.Fatal(err)
				}
			}
			b.waitFor(20*time.Second, "the new run refutes the forged leave", func() bool {
				m, _ := b.ring.Member(v.name)
				return m.State == vocab.MemberAlive
			})
			for _, s := range []vocab.Announcement{vocab.AnnounceShuttingDown, vocab.AnnounceShutdownComplete} {
				if err := v.ring.Announce(s); err != nil {
					t.Fatal(err)
				}
			}
			if err := v.ring.Leave(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			b.waitFor(20*time.Second, "the new run's clean shutdown taints on its own word", func() bool {
				n, _ := b.client.CoreV1().Nodes().Get(context.Background(), v.name, metav1.GetOptions{})
				ev, ok, _ := taint.EvidenceOf(n)
				return taint.HasTaint(n) && ok && ev.Method == vocab.EvidenceCleanShutdown
			})
		})
	}
}

// TestKeyTrust: which Lease key the fencer stops trusting, step by step.
// A member of the Lease key's boot that does not sign with it shows it
// stale; a key that reached the Lease while its member was unsigned is
// that run's own, published late; a valid proof from the key's holder, or
// another key on the Lease, ends the distrust.
func TestKeyTrust(t *testing.T) {
	keyOf := func(boot string) publish.Key {
		k, err := identity.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		return publish.Key{Node: "n", BootID: boot, Key: k.Public()}
	}
	type step struct {
		do    string // "unsigned", "bad-signature", "verified", "proven"
		lease int    // index into keys; -1: no key on the Lease
		boot  string // the statement's boot
	}
	for _, tc := range []struct {
		name  string
		steps []step
		stale []int // keys stale at the end (checked in order; each check may drop marks of other keys)
		fresh []int
	}{
		{name: "unsigned, same boot", steps: []step{{"unsigned", 0, "b1"}}, stale: []int{0}},
		{name: "unsigned, another boot (a reboot)", steps: []step{{"unsigned", 0, "b2"}}, fresh: []int{0}},
		{name: "bad signature, same boot", steps: []step{{"bad-signature", 0, "b1"}}, stale: []int{0}},
		{name: "bad signature, another boot", steps: []step{{"bad-signature", 0, "b2"}}, fresh: []int{0}},
		{name: "the new run's key lands while it is unsigned",
			steps: []step{{"unsigned", 0, "b1"}, {"unsigned", 1, "b1"}}, fresh: []int{1}},
		{name: "no key when first heard unsigned, then one lands",
			steps: []step{{"unsigned", -1, "b1"}, {"unsigned", 1, "b1"}}, fresh: []int{1}},
		{name: "unsigned again after a valid signature",
			steps: []step{{"unsigned", 0, "b1"}, {"verified", 1, "b1"}, {"unsigned", 1, "b1"}}, stale: []int{1}},
		{name: "a bad signature after the late key landed",
			steps: []step{{"unsigned", 0, "b1"}, {"bad-signature", 1, "b1"}}, stale: []int{1}},
		{name: "the key's holder proves it", steps: []step{{"bad-signature", 0, "b1"}, {"proven", 0, "b1"}}, fresh: []int{0}},
		{name: "a proof by another key changes nothing", steps: []step{{"bad-signature", 0, "b1"}, {"proven", 1, "b1"}}, stale: []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &Fencer{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			keys := []publish.Key{keyOf("b1"), keyOf("b1")}
			for _, s := range tc.steps {
				k, ok := publish.Key{}, s.lease >= 0
				if ok {
					k = keys[s.lease]
				}
				switch s.do {
				case "unsigned", "bad-signature":
					f.sawUnverified("n", k, ok, s.boot, s.do == "bad-signature")
				case "verified":
					f.sawVerified("n")
				case "proven":
					f.keyProven("n", k)
				}
			}
			for _, i := range tc.stale {
				if !f.keyStale("n", keys[i]) {
					t.Errorf("key %d trusted, want stale", i)
				}
			}
			for _, i := range tc.fresh {
				if f.keyStale("n", keys[i]) {
					t.Errorf("key %d stale, want trusted", i)
				}
			}
		})
	}
}
