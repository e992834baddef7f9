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
	"fenced.io/fenced/internal/testbed/procstat"
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
			cfg := lanConfig(b, "fencer", 0)
			start(b, cfg, Options{Meta: Meta{BootID: "boot-fencer", Role: RoleFencer, Agent: "bench"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			child := exec.Command(os.Args[0], "-test.run=^TestBeatFloodChild$", "-test.bench=^$")
			child.Env = append(os.Environ(), beatFloodTo+"="+net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.BindPort)), beatFloodForm+"="+form)
			if err := child.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
			time.Sleep(time.Second) // the flood under way: a warm-up, not a wait for a condition
			reportCPUShare(b, 3*time.Second, func() float64 {
				var ru syscall.Rusage // finer than /proc's 10 ms ticks
				if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
					b.Fatal(err)
				}
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
			})
		})
	}
}

// BenchmarkAgentCPUBeating is what beating costs an agent: an agent's ring
// in another process (this test binary again, as TestAgentChild), joined
// to three fencers here with the LAN profile's timings, beating to them
// at the default interval (beats) or not at all (no-beats). The figure is
// the child's user and system time over 10 s windows, in % of a core; the
// difference between the two is the beats' share.
func BenchmarkAgentCPUBeating(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var fencers []*Ring
	for _, n := range []string{"fencer-1", "fencer-2", "fencer-3"} {
		opts := Options{Meta: Meta{BootID: "boot-" + n, Role: RoleFencer, Agent: "bench"}, Logger: quiet}
		if len(fencers) > 0 {
			opts.Seeds = seedsOf(fencers[0].LocalAddr())
		}
		fencers = append(fencers, start(b, lanConfig(b, n, 0), opts))
	}
	for i, mode := range []string{"beats", "no-beats"} {
		b.Run(mode, func(b *testing.B) {
			child := exec.Command(os.Args[0], "-test.run=^TestAgentChild$", "-test.bench=^$")
			child.Env = append(os.Environ(), agentChildSeed+"="+fencers[0].LocalAddr(), agentChildName+"="+fmt.Sprintf("agent-%d", i),
				agentChildPort+"="+strconv.Itoa(freePort(b)), agentChildBeats+"="+strconv.FormatBool(mode == "beats"))
			if err := child.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
			poll.Until(b, settle, "the fencers see the agent", func() bool {
				_, ok := fencers[2].Member(fmt.Sprintf("agent-%d", i))
				return ok
			})
			time.Sleep(2 * time.Second) // the agent's start behind it: a warm-up, not a wait for a condition
			reportCPUShare(b, 10*time.Second, func() float64 { return procstat.CPUSeconds(child.Process.Pid) })
		})
	}
}

// reportCPUShare reports, as %cpu, the CPU time cpu (seconds so far)
// counts over each of b's windows, against their wall time.
func reportCPUShare(b *testing.B, window time.Duration, cpu func() float64) {
	b.Helper()
	var used, elapsed float64
	for b.Loop() {
		c0, w0 := cpu(), time.Now()
		time.Sleep(window)
		used, elapsed = used+cpu()-c0, elapsed+time.Since(w0).Seconds()
	}
	b.ReportMetric(100*used/elapsed, "%cpu")
}

// lanConfig is fastConfig with the LAN profile's gossip timings, as a
// ring in the field runs by default.
func lanConfig(t testing.TB, name string, port int) Config {
	t.Helper()
	c := fastConfig(t, name, port)
	d := DefaultConfig()
	c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult, c.GossipInterval = d.ProbeInterval, d.ProbeTimeout, d.SuspicionMult, d.GossipInterval
	return c
}

// The environment of TestAgentChild: the seed it joins, its name and
// port, and whether it beats.
const (
	agentChildSeed  = "FENCED_AGENT_CHILD_SEED"
	agentChildName  = "FENCED_AGENT_CHILD_NAME"
	agentChildPort  = "FENCED_AGENT_CHILD_PORT"
	agentChildBeats = "FENCED_AGENT_CHILD_BEATS"
)

// TestAgentChild is BenchmarkAgentCPUBeating's agent: run alone, it does
// nothing. It joins the seed as an observer with the LAN profile's
// timings and stays until it is killed (or for five minutes).
func TestAgentChild(t *testing.T) {
	seed := os.Getenv(agentChildSeed)
	if seed == "" {
		t.Skip("the agent of BenchmarkAgentCPUBeating")
	}
	port, err := strconv.Atoi(os.Getenv(agentChildPort))
	if err != nil {
		t.Fatal(err)
	}
	cfg := lanConfig(t, os.Getenv(agentChildName), port)
	if os.Getenv(agentChildBeats) != "true" {
		cfg.BeatInterval = -1
	}
	r, err := New(cfg, Options{Meta: testMeta("boot-" + cfg.NodeName), Seeds: seedsOf(seed), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Join(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	time.Sleep(5 * time.Minute)
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
