package heartbeat

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/hostile"
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

// BenchmarkBeatSent is an agent's work for one beat to one fencer (what
// beatLoop does per fencer per interval). sealed: sealed with the gossip
// key and label, and the datagram's send; memberlist: to a fencer of an
// earlier version, memberlist's encoding, its AES-GCM encryption with a
// cipher built for the packet, and the send.
func BenchmarkBeatSent(b *testing.B) {
	f := start(b, fastConfig(b, "fencer", 0), Options{Meta: Meta{BootID: "boot-fencer", Role: RoleFencer, Agent: "bench"}})
	a := start(b, fastConfig(b, "a", 0), Options{Seeds: seedsOf(f.LocalAddr())})
	poll.Until(b, settle, "a sees the fencer", func() bool { return a.Alive() == 2 })
	to, err := nodeOf("fencer", f.LocalAddr())
	if err != nil {
		b.Fatal(err)
	}
	ml := a.ml.Load()
	b.Run("sealed", func(b *testing.B) {
		own := a.mc.Transport.(*transport)
		keys := a.beatKeys.Load()
		var sealed []byte
		b.ReportAllocs()
		for b.Loop() {
			sealed = keys.seal(sealed[:0], "a")
			if _, err := own.WriteTo(sealed, to.Address()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memberlist", func(b *testing.B) {
		msg := EncodeBeat("a")
		b.ReportAllocs()
		for b.Loop() {
			if err := ml.SendBestEffort(to, msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFencerCPUAtBeatRate is what a fencer's ring costs in CPU while
// a 1000-node cluster beats to it: five beats a millisecond, as evenly
// spread as the agents' own timers make them, sent by another process
// (this test binary again, as TestBeatFloodChild), so that the figure is
// the receiving process's alone: its user and system time over a 3 s
// window, in % of a core. sealed: the beats agents send a fencer that
// reads sealed beats (sealedbeat.go); memberlist: those of agents of an
// earlier version, user messages through memberlist, encrypted and
// labelled; idle: no beats, the ring's own timers alone. The names are no
// members of its ring (their beats are dropped
// after the lookup), which leaves out the Detector's update
// (BenchmarkBeatReceived, ~0.1 µs a beat).
func BenchmarkFencerCPUAtBeatRate(b *testing.B) {
	for _, form := range []string{"sealed", "memberlist", "idle"} {
		b.Run(form, func(b *testing.B) {
			cfg := fastConfig(b, "fencer", 0)
			cfg.ProbeInterval, cfg.ProbeTimeout, cfg.GossipInterval = time.Second, 500*time.Millisecond, 200*time.Millisecond
			start(b, cfg, Options{Meta: Meta{BootID: "boot-fencer", Role: RoleFencer, Agent: "bench"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			child := exec.Command(os.Args[0], "-test.run=^TestBeatFloodChild$", "-test.bench=^$")
			child.Env = append(os.Environ(), beatFloodTo+"="+net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.BindPort)), beatFloodForm+"="+form)
			if err := child.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
			time.Sleep(time.Second) // the flood under way: a warm-up, not a wait for a condition
			cpu := func() time.Duration {
				var ru syscall.Rusage
				if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
					b.Fatal(err)
				}
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			const window = 3 * time.Second
			var used, elapsed time.Duration
			for b.Loop() {
				c0, w0 := cpu(), time.Now()
				time.Sleep(window)
				used, elapsed = used+cpu()-c0, elapsed+time.Since(w0)
			}
			b.ReportMetric(100*used.Seconds()/elapsed.Seconds(), "%cpu")
		})
	}
}

// beatFloodTo names the environment variable that makes
// TestBeatFloodChild flood that address with beats, beatFloodForm the one
// that says in which form: sealed, or memberlist's.
const (
	beatFloodTo   = "FENCED_BEAT_FLOOD_TO"
	beatFloodForm = "FENCED_BEAT_FLOOD_FORM"
)

// TestBeatFloodChild is BenchmarkFencerCPUAtBeatRate's sender: run
// alone, it does nothing. It sends the beats of 1000 names, five a
// millisecond, until it is killed (or for a minute).
func TestBeatFloodChild(t *testing.T) {
	to := os.Getenv(beatFloodTo)
	if to == "" {
		t.Skip("the sender of BenchmarkFencerCPUAtBeatRate")
	}
	f, err := hostile.New(testKey, "test")
	if err != nil {
		t.Fatal(err)
	}
	sealed := os.Getenv(beatFloodForm) == "sealed"
	msgs := make([][]byte, 1000)
	for i := range msgs {
		name := fmt.Sprintf("node-%04d", i)
		if !sealed {
			msgs[i] = EncodeBeat(name)
			continue
		}
		// Sealed once per name: the receiver's work is the same as for
		// beats sealed each time, as agents seal them.
		if msgs[i], err = SealBeat(testKey, "test", name); err != nil {
			t.Fatal(err)
		}
	}
	const perTick = 5
	tick := time.NewTicker(DefaultBeatInterval * perTick / time.Duration(len(msgs)))
	defer tick.Stop()
	end := time.Now().Add(time.Minute)
	for i := 0; time.Now().Before(end); i = (i + perTick) % len(msgs) {
		<-tick.C
		if os.Getenv(beatFloodForm) == "idle" {
			continue
		}
		for _, m := range msgs[i : i+perTick] {
			if sealed {
				_ = f.Datagram(to, m)
			} else {
				_ = f.UserUDP(to, m)
			}
		}
	}
}
