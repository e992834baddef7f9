package heartbeat

import (
	"bytes"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/hostile"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/vocab"
)

var otherKey32 = []byte("fedcba9876543210fedcba9876543210")

// TestSealedBeatOpensOnlyUnderTheRingsKeysAndLabel: a sealed beat opens
// with the key it was sealed under among a keyring's keys, for the label
// it was sealed for; anything else — another key, another cluster's
// label, a beat in memberlist's form, a byte changed, cut or added, a
// name longer than any member's — opens with none.
func TestSealedBeatOpensOnlyUnderTheRingsKeysAndLabel(t *testing.T) {
	sealed := func(key []byte, label, name string) []byte {
		t.Helper()
		b, err := SealBeat(key, label, name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := sealed(testKey, "test", "worker-1")
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1
	for _, tc := range []struct {
		name  string
		keys  [][]byte
		label string
		beat  []byte
		want  string // "": opens with none
	}{
		{"the ring's key and label", [][]byte{testKey}, "test", good, "worker-1"},
		{"a keyring holding the key second", [][]byte{otherKey32, testKey}, "test", good, "worker-1"},
		{"another key", [][]byte{otherKey32}, "test", good, ""},
		{"another cluster's label", [][]byte{testKey}, "prod", good, ""},
		{"no label against one", [][]byte{testKey}, "", good, ""},
		{"memberlist's form of a beat", [][]byte{testKey}, "test", EncodeBeat("worker-1"), ""},
		{"a byte changed", [][]byte{testKey}, "test", flipped, ""},
		{"cut short", [][]byte{testKey}, "test", good[:len(good)-1], ""},
		{"a byte added", [][]byte{testKey}, "test", append(bytes.Clone(good), 0), ""},
		{"the tag alone", [][]byte{testKey}, "test", []byte{sealedBeatTag}, ""},
		{"an empty name", [][]byte{testKey}, "test", sealed(testKey, "test", ""), ""},
		{"a name longer than a member's", [][]byte{testKey}, "test", sealed(testKey, "test", string(bytes.Repeat([]byte("n"), maxNameLen+1))), ""},
		{"the longest name", [][]byte{testKey}, "test", sealed(testKey, "test", string(bytes.Repeat([]byte("n"), maxNameLen))), string(bytes.Repeat([]byte("n"), maxNameLen))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := newBeatKeys(tc.keys, tc.label)
			if err != nil {
				t.Fatal(err)
			}
			name, ok := k.open(nil, tc.beat)
			if got := string(name); ok != (tc.want != "") || got != tc.want {
				t.Errorf("opened %q (%v), want %q", got, ok, tc.want)
			}
		})
	}
	if a, b := sealed(testKey, "test", "w"), sealed(testKey, "test", "w"); bytes.Equal(a, b) {
		t.Error("two beats of one name are the same bytes: the nonce is not new for each")
	}
}

// FuzzOpenSealedBeat: no datagram panics the opener of sealed beats, and
// none but the one beat sealed here under the ring's key opens.
func FuzzOpenSealedBeat(f *testing.F) {
	k, err := newBeatKeys([][]byte{testKey}, "test")
	if err != nil {
		f.Fatal(err)
	}
	// Sealed with a fixed nonce, not seal's random one: each fuzzing
	// process builds it again and must find the same bytes.
	nonce := make([]byte, beatNonceLen)
	good := k.aeads[0].Seal(append([]byte{sealedBeatTag}, nonce...), nonce, []byte("worker-1"), k.ad)
	f.Add(good)
	f.Add([]byte{sealedBeatTag})
	f.Add(EncodeBeat("worker-1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if name, ok := k.open(nil, b); ok && (!bytes.Equal(b, good) || string(name) != "worker-1") {
			t.Fatalf("%x, not sealed here, opened as %q", b, name)
		}
	})
}

// TestSealedBeatsToFencersThatReadThem: an agent seals its beats for a
// fencer that reads them, and the fencer counts them as beats; to a
// fencer that does not say it reads them — one of an earlier version
// during a rolling upgrade, here one whose transport is not the ring's
// own — it beats through memberlist, and that fencer counts those. A
// sealed beat under a key the ring does not hold, or in the name of no
// member, is counted as no member's beat.
func TestSealedBeatsToFencersThatReadThem(t *testing.T) {
	cfg := func(name string) Config {
		c := fastConfig(t, name, 0)
		c.BeatInterval = 50 * time.Millisecond
		return c
	}
	fencerMeta := func(name string) Meta {
		return Meta{BootID: "boot-" + name, Role: RoleFencer, Agent: "test"}
	}
	reads := start(t, cfg("reads"), Options{Meta: fencerMeta("reads")})
	oldCfg := cfg("old")
	tr, err := newTransport(oldCfg.BindAddr, oldCfg.BindPort, testLogger(t, "old transport"))
	if err != nil {
		t.Fatal(err)
	}
	old := start(t, oldCfg, Options{Meta: fencerMeta("old"), Transport: tr, Seeds: seedsOf(reads.LocalAddr())})
	a := start(t, cfg("a"), Options{Seeds: seedsOf(reads.LocalAddr())})
	if m, _ := reads.Member("reads"); !m.Meta.SealedBeats {
		t.Fatal("a fencer with its own transport does not say it reads sealed beats")
	}
	if m, _ := old.Member("old"); m.Meta.SealedBeats {
		t.Fatal("a fencer whose transport is given says it reads sealed beats")
	}
	if m, _ := a.Member("a"); m.Meta.SealedBeats {
		t.Error("an observer says it reads sealed beats")
	}
	poll.Until(t, settle, "all three see each other alive", func() bool {
		return reads.Alive() == 3 && old.Alive() == 3 && a.Alive() == 3
	})
	poll.Until(t, settle, "both fencers have a's beats", func() bool {
		return reads.detector.Silence("a", time.Now()).Known && old.detector.Silence("a", time.Now()).Known
	})
	poll.Until(t, settle, "sealed beats counted by the fencer that reads them", func() bool { return reads.beatsSealed.Load() > 10 })
	if n := old.beatsSealed.Load(); n != 0 {
		t.Errorf("the fencer that does not read sealed beats counted %d", n)
	}
	if n := reads.beatsRefused.Load(); n != 0 {
		t.Errorf("%d sealed beats of the ring's own members refused", n)
	}

	// A beat under another key, or of no member, is nobody's beat.
	f, err := hostile.New(testKey, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	forged, err := SealBeat(otherKey32, "test", "a")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := SealBeat(testKey, "test", "stranger")
	if err != nil {
		t.Fatal(err)
	}
	refused := reads.beatsRefused.Load()
	for range 5 {
		for _, b := range [][]byte{forged, stranger} {
			if err := f.Datagram(reads.LocalAddr(), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	poll.Until(t, settle, "the beats under another key refused", func() bool { return reads.beatsRefused.Load() >= refused+5 })
	if reads.detector.Silence("stranger", time.Now()).Known {
		t.Error("a beat in the name of no member reached the Detector")
	}
	if m, ok := reads.Member("stranger"); ok {
		t.Errorf("a beat in the name of no member made it one: %+v", m)
	}
	if m, _ := reads.Member("a"); m.State != vocab.MemberAlive || m.Silent {
		t.Errorf("a: %+v", m)
	}
}
