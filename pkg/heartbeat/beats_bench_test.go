package heartbeat

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/vocab"
)

// fencerOf is a fencer's ring, not joined, that sees n alive members
// beating: what a fencer of an n-node cluster keeps.
func fencerOf(n int) (*Ring, []string) {
	r := newRing("fencer", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	r.detector = NewDetector(DetectorConfig{})
	names := make([]string, n)
	now := time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
		r.members[names[i]] = &Member{Name: names[i], State: vocab.MemberAlive}
		for k := range 20 {
			r.detector.Beat(names[i], now.Add(time.Duration(k-20)*DefaultBeatInterval))
		}
	}
	return r, names
}

// BenchmarkBeatReceived is a fencer's work for one beat once memberlist
// has handed it over (decrypted): decode, look the member up, the
// Detector's update. A 1000-node cluster sends a fencer 5000 a second.
func BenchmarkBeatReceived(b *testing.B) {
	r, names := fencerOf(1000)
	d := (*delegate)(r)
	msgs := make([][]byte, len(names))
	for i, n := range names {
		msgs[i] = EncodeBeat(n)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d.NotifyMsg(msgs[i%len(msgs)])
	}
}

// BenchmarkSilenceLook is one look of a fencer's silence loop over every
// member of a 1000-node cluster (ten looks a second at the default beat
// interval).
func BenchmarkSilenceLook(b *testing.B) {
	r, _ := fencerOf(1000)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if changed, _ := r.lookForSilence(now, false); len(changed) != 0 {
			b.Fatalf("%d members silent", len(changed))
		}
	}
}

// BenchmarkBeatSent is an agent's work for one beat to one fencer:
// memberlist's encoding, AES-GCM encryption with the gossip key and label,
// and the datagram's send (what beatLoop does per fencer per interval).
func BenchmarkBeatSent(b *testing.B) {
	f := start(b, fastConfig(b, "fencer", 0), Options{Meta: Meta{BootID: "boot-fencer", Role: RoleFencer, Agent: "bench"}})
	a := start(b, fastConfig(b, "a", 0), Options{Seeds: seedsOf(f.LocalAddr())})
	poll.Until(b, settle, "a sees the fencer", func() bool { return a.Alive() == 2 })
	to, err := nodeOf("fencer", f.LocalAddr())
	if err != nil {
		b.Fatal(err)
	}
	ml := a.ml.Load()
	msg := EncodeBeat("a")
	b.ReportAllocs()
	for b.Loop() {
		if err := ml.SendBestEffort(to, msg); err != nil {
			b.Fatal(err)
		}
	}
}
