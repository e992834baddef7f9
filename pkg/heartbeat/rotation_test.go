package heartbeat

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/hostile"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/vocab"
)

// gossipTrouble counts what memberlist logs when members stop hearing
// each other: a packet or stream no key of the keyring opens, a member
// suspected after its probes went unanswered, a suspect declared failed.
type gossipTrouble struct {
	undecryptable, suspected, failed atomic.Int64
}

func (g *gossipTrouble) String() string {
	return fmt.Sprintf("%d undecryptable, %d suspicions, %d failed", g.undecryptable.Load(), g.suspected.Load(), g.failed.Load())
}

// troubleHandler counts memberlist's lines (forwarded at debug level by
// memberlistLogger) into its gossipTrouble and passes info and above on.
type troubleHandler struct {
	next slog.Handler
	c    *gossipTrouble
}

func (h troubleHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h troubleHandler) Handle(ctx context.Context, r slog.Record) error {
	switch msg := r.Message; {
	case strings.HasPrefix(msg, "Decrypt packet failed"), strings.Contains(msg, "cipher: message authentication failed"):
		h.c.undecryptable.Add(1)
	case strings.HasPrefix(msg, "Suspect ") && strings.Contains(msg, "has failed"):
		h.c.suspected.Add(1)
	case strings.HasPrefix(msg, "Marking ") && strings.Contains(msg, "as failed"):
		h.c.failed.Add(1)
	}
	if r.Level >= slog.LevelInfo {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h troubleHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return troubleHandler{next: h.next.WithAttrs(attrs), c: h.c}
}

func (h troubleHandler) WithGroup(name string) slog.Handler {
	return troubleHandler{next: h.next.WithGroup(name), c: h.c}
}

// rotationRing starts a member with keys whose memberlist lines are
// counted in c; the first (no seed) is a fencer, which the others beat to
// with sealed beats. Its timings are the fast profile's: a probe answered
// late under load is not what these tests look for.
func rotationRing(t *testing.T, name string, keys KeySet, seed *Ring, c *gossipTrouble) *Ring {
	t.Helper()
	cfg := fastConfig(t, name, 0)
	fast := FastConfig()
	cfg.ProbeInterval, cfg.ProbeTimeout, cfg.SuspicionMult, cfg.GossipInterval = fast.ProbeInterval, fast.ProbeTimeout, fast.SuspicionMult, fast.GossipInterval
	cfg.SecretKey, cfg.SecondaryKeys = keys.Primary, keys.Secondary
	opts := Options{Logger: slog.New(troubleHandler{next: testLogger(t, name).Handler(), c: c})}
	if seed != nil {
		opts.Seeds = seedsOf(seed.LocalAddr())
	} else {
		opts.Meta = Meta{BootID: "boot-" + name, Role: RoleFencer, Agent: "test"}
	}
	return start(t, cfg, opts)
}

// rotationRings starts members called names with keys, all joined through
// the first, and waits until each sees all alive.
func rotationRings(t *testing.T, keys KeySet, names ...string) (map[string]*Ring, map[string]*gossipTrouble) {
	t.Helper()
	rings, trouble := map[string]*Ring{}, map[string]*gossipTrouble{}
	var seed *Ring
	for _, n := range names {
		trouble[n] = &gossipTrouble{}
		rings[n] = rotationRing(t, n, keys, seed, trouble[n])
		if seed == nil {
			seed = rings[n]
		}
	}
	for _, n := range names {
		poll.Until(t, settle, n+" sees every member alive", func() bool { return rings[n].Alive() == len(names) })
	}
	return rings, trouble
}

var otherKey = []byte("fedcba9876543210fedcba9876543210")

// TestKeyRotationWithoutASplit rotates the gossip key of four real rings
// on loopback through the three steps (add the new key, switch to it,
// remove the old one), each member taking each step at its own time as
// agents reading their own copy of a Secret do — and with the steps taken
// too early: a switches before anyone else holds the new key, c switches
// without ever holding it as a secondary, and a, b and c remove the old
// key while d still has it as its primary. No member ever fails to
// decrypt another, suspects one or declares one failed, the fencer (a)
// opens every sealed beat and finds no member silent, and every member
// ends up with the new key alone. Without the plan (the ring's keys set
// straight into memberlist's keyring) the first of these splits the ring
// (TestEarlySwitchSplitsPlainMemberlist) and the last drops d's packets
// until d follows (TestRetainKeys).
func TestKeyRotationWithoutASplit(t *testing.T) {
	old, next := testKey, otherKey
	step0 := KeySet{Primary: old}
	step1 := KeySet{Primary: old, Secondary: [][]byte{next}}
	step2 := KeySet{Primary: next, Secondary: [][]byte{old}}
	step3 := KeySet{Primary: next}
	names := []string{"a", "b", "c", "d"}
	rings, trouble := rotationRings(t, step0, names...)

	set := func(name string, keys KeySet) {
		t.Helper()
		if err := rings[name].SetKeys(keys); err != nil {
			t.Fatalf("%s: SetKeys(%s): %v", name, keys, err)
		}
	}
	encrypts := func(name string, key []byte, asSet bool) {
		t.Helper()
		poll.Until(t, settle, fmt.Sprintf("%s encrypts with %s (as set: %v)", name, Fingerprint(key), asSet), func() bool {
			s := rings[name].Keyring()
			return s.Encrypt == Fingerprint(key) && s.AsSet == asSet
		})
	}

	// The switch, on a alone: nobody else can decrypt the new key, so a
	// keeps encrypting with the old one, and holds both.
	set("a", step2)
	if s := rings["a"].Keyring(); s.Encrypt != Fingerprint(old) || s.AsSet || !slices.Equal(s.Decrypt, []string{Fingerprint(next)}) {
		t.Fatalf("a switched before the others hold the new key: %+v", s)
	}
	// The first step on b and d, and c straight to the second.
	set("b", step1)
	set("d", step1)
	set("c", step2)
	encrypts("a", next, true)
	encrypts("c", next, true)
	encrypts("b", old, true)
	encrypts("d", old, true)
	// The second step on b; d never gets it.
	set("b", step2)
	encrypts("b", next, true)
	// The third step on a, b and c: they keep the old key to decrypt d,
	// which still encrypts with it, and advertise it as leaving; d, its
	// files still at the first step, follows them to the new key, the one
	// they all hold; then they drop the old key.
	for _, n := range []string{"a", "b", "c"} {
		set(n, step3)
	}
	encrypts("d", next, false)
	for _, n := range []string{"a", "b", "c"} {
		encrypts(n, next, true)
		if s := rings[n].Keyring(); len(s.Decrypt) != 0 || len(s.Leaving) != 0 {
			t.Errorf("%s kept a key the files dropped: %+v", n, s)
		}
	}
	set("d", step3)
	encrypts("d", next, true)
	sealed := rings["a"].beatsSealed.Load()
	poll.Until(t, settle, "sealed beats under the new key opened", func() bool { return rings["a"].beatsSealed.Load() > sealed+10 })

	// A suspicion is logged when it starts and a failure within the
	// suspicion timeout (~1 s here): wait past both.
	time.Sleep(quietFor)
	if n := rings["a"].beatsRefused.Load(); n != 0 {
		t.Errorf("the fencer could not open %d sealed beats during the rotation", n)
	}
	// The old key is gone from the beats too: one sealed under it opens
	// no more.
	f, err := hostile.New(next, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	stale, err := SealBeat(old, "test", "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Datagram(rings["a"].LocalAddr(), stale); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "a beat under the removed key refused", func() bool { return rings["a"].beatsRefused.Load() > 0 })
	for _, n := range names {
		if s := trouble[n].String(); s != "0 undecryptable, 0 suspicions, 0 failed" {
			t.Errorf("%s during the rotation: %s", n, s)
		}
		for _, m := range changesOf(t, rings[n]) {
			if m.State != vocab.MemberAlive || m.Silent {
				t.Errorf("%s saw %s %s (silent: %v) during the rotation", n, m.Name, m.State, m.Silent)
			}
		}
		for _, m := range rings[n].Members() {
			if m.State != vocab.MemberAlive || m.Meta.Keys != Fingerprint(next) {
				t.Errorf("%s sees %s %s holding %q, want alive holding only %s", n, m.Name, m.State, m.Meta.Keys, Fingerprint(next))
			}
		}
	}
}

// TestEarlySwitchSplitsPlainMemberlist is what the ring's plan prevents:
// told to encrypt with a key the others do not hold yet, as memberlist's
// Keyring.UseKey does at once, a member's probes' answers and gossip are
// dropped by the others ("Decrypt packet failed"), and they suspect it.
func TestEarlySwitchSplitsPlainMemberlist(t *testing.T) {
	rings, trouble := rotationRings(t, KeySet{Primary: testKey}, "a", "b", "c")
	kr := rings["a"].keyring
	if err := kr.AddKey(otherKey); err != nil {
		t.Fatal(err)
	}
	if err := kr.UseKey(otherKey); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, settle, "b and c cannot decrypt a and suspect it", func() bool {
		return trouble["b"].undecryptable.Load() > 0 && trouble["c"].undecryptable.Load() > 0 &&
			trouble["b"].suspected.Load()+trouble["c"].suspected.Load() > 0
	})
	t.Logf("after a's early switch: b %s; c %s", trouble["b"], trouble["c"])
}

// TestSetKeysRefusesBadSets: SetKeys refuses what KeySet.Validate
// refuses and keeps the keys in use; a ring without encryption has no
// keys to set.
func TestSetKeysRefusesBadSets(t *testing.T) {
	r, err := New(fastConfig(t, "a", 0), Options{Meta: testMeta("boot-a")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown() })
	before := r.Keyring()
	for _, bad := range []KeySet{{}, {Primary: otherKey, Secondary: [][]byte{otherKey}}, {Primary: make([]byte, 20)}} {
		if err := r.SetKeys(bad); err == nil {
			t.Errorf("SetKeys(%s) accepted", bad)
		}
	}
	if after := r.Keyring(); after.Encrypt != before.Encrypt || !slices.Equal(after.Decrypt, before.Decrypt) || !after.AsSet {
		t.Errorf("keyring changed by refused sets: %+v, was %+v", after, before)
	}
	// Before Join the set is in use at once, and the join carries it.
	if err := r.SetKeys(KeySet{Primary: otherKey, Secondary: [][]byte{testKey}}); err != nil {
		t.Fatal(err)
	}
	if s := r.Keyring(); s.Encrypt != Fingerprint(otherKey) || !s.AsSet {
		t.Errorf("before Join, keyring %+v", s)
	}
	if got, want := r.meta.Keys, Fingerprint(otherKey)+","+Fingerprint(testKey); got != want {
		t.Errorf("Meta.Keys = %q, want %q", got, want)
	}

	cfg := fastConfig(t, "plain", 0)
	cfg.SecretKey, cfg.Insecure = nil, true
	plain, err := New(cfg, Options{Meta: testMeta("boot-p")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Shutdown() })
	if err := plain.SetKeys(KeySet{Primary: testKey}); err != ErrInsecure {
		t.Errorf("SetKeys without encryption = %v, want ErrInsecure", err)
	}
	if s := plain.Keyring(); s.Encrypt != "" || plain.meta.Keys != "" {
		t.Errorf("a ring without encryption reports keys: %+v, %q", s, plain.meta.Keys)
	}
}
