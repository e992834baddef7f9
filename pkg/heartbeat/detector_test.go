package heartbeat

import (
	"math/rand/v2"
	"testing"
	"time"
)

var d0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// beatEvery feeds n beats of name from d0, every interval plus a jitter
// drawn by jitter.
func beatEvery(d *Detector, name string, n int, interval time.Duration, jitter func() time.Duration) {
	at := d0
	for range n {
		d.Beat(name, at)
		at = at.Add(interval + jitter())
	}
}

func none() time.Duration { return 0 }

// TestDetectorDefaults: a member beating on time at the default pace is
// silent between four lost beats in a row and five — the figure the
// default configuration's comment gives — and never before its usual
// interval.
func TestDetectorDefaults(t *testing.T) {
	d := NewDetector(DetectorConfig{})
	beatEvery(d, "a", 200, 200*time.Millisecond, none)
	last := d.Silence("a", d0).Last
	after := d.SilentAfter("a")
	if after <= time.Second || after >= 1200*time.Millisecond {
		t.Fatalf("silent %s after the last beat; want between 1.0 s (four lost) and 1.2 s (five lost)", after)
	}
	for _, tc := range []struct {
		since         time.Duration
		doubt, silent bool
	}{
		{200 * time.Millisecond, false, false},
		{600 * time.Millisecond, false, false}, // two lost beats
		{850 * time.Millisecond, true, false},  // in doubt: its agent is asked
		{time.Second, true, false},
		{after - time.Millisecond, true, false},
		{after + time.Millisecond, true, true},
		{5 * time.Second, true, true},
	} {
		if s := d.Silence("a", last.Add(tc.since)); s.Silent != tc.silent || s.Doubt != tc.doubt || !s.Known {
			t.Errorf("%s after the last beat: %+v, want doubt=%v silent=%v", tc.since, s, tc.doubt, tc.silent)
		}
	}
	t.Logf("default detector: silent %s after the last beat of a member on time", after.Round(time.Millisecond))
}

// TestDetectorAdapts: the silence that counts grows with a member's own
// jitter — a starved node that beats late now and then is not suspected
// at the pace of one on time — and shrinks back when it steadies; every
// member is judged on its own history, whatever the others do.
func TestDetectorAdapts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	d := NewDetector(DetectorConfig{})
	beatEvery(d, "steady", 200, 200*time.Millisecond, none)
	// Starved: one beat in five late by up to 400 ms.
	beatEvery(d, "starved", 200, 200*time.Millisecond, func() time.Duration {
		if rng.IntN(5) == 0 {
			return time.Duration(rng.IntN(400)) * time.Millisecond
		}
		return 0
	})
	s, j := d.SilentAfter("steady"), d.SilentAfter("starved")
	if j <= s+200*time.Millisecond {
		t.Errorf("starved member silent after %s, steady after %s: want the starved one given more", j, s)
	}
	// The starved member steadies: its window fills with on-time beats.
	last := d.Silence("starved", d0).Last
	for i := 1; i <= 100; i++ {
		d.Beat("starved", last.Add(time.Duration(i)*200*time.Millisecond))
	}
	if again := d.SilentAfter("starved"); again != s {
		t.Errorf("after 100 beats on time: silent after %s, want %s as the steady one", again, s)
	}
	t.Logf("silent after: steady %s, starved %s", s.Round(time.Millisecond), j.Round(time.Millisecond))
}

// TestDetectorLoss: at 5 % packet loss and the default pace, a member
// that beats on time is found silent about as often as five beats in a
// row are lost — 0.13 a day — not every time four are.
func TestDetectorLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	d := NewDetector(DetectorConfig{})
	const beats = 432_000 // a day at 200 ms
	at, silences := d0, 0
	prev := at
	for range beats {
		at = at.Add(200 * time.Millisecond)
		if rng.Float64() < 0.05 {
			continue // lost
		}
		// Silent before this beat came?
		if d.Silence("a", prev).Known && at.Sub(prev) > d.SilentAfter("a") {
			silences++
		}
		d.Beat("a", at)
		prev = at
	}
	if silences > 2 {
		t.Errorf("%d silences in a day of beats at 5 %% loss; want about 0.13", silences)
	}
	t.Logf("a day at 5 %% loss: %d silence(s)", silences)
}

// TestDetectorEdges: a member never heard is not known (nor silent); a
// beat older than the last changes nothing; a forgotten member is unknown
// again; phi grows with the silence.
func TestDetectorEdges(t *testing.T) {
	d := NewDetector(DetectorConfig{})
	if s := d.Silence("x", d0); s.Known || s.Silent {
		t.Errorf("never heard: %+v", s)
	}
	d.Beat("x", d0)
	d.Beat("x", d0.Add(200*time.Millisecond))
	d.Beat("x", d0.Add(100*time.Millisecond)) // reordered
	if s := d.Silence("x", d0.Add(300*time.Millisecond)); !s.Last.Equal(d0.Add(200 * time.Millisecond)) {
		t.Errorf("last beat %s after a reordered one", s.Last)
	}
	prev := -1.0
	for ms := 0; ms <= 3000; ms += 100 {
		p := d.Phi("x", d0.Add(200*time.Millisecond+time.Duration(ms)*time.Millisecond))
		if p < prev {
			t.Fatalf("phi fell from %v to %v at %d ms", prev, p, ms)
		}
		prev = p
	}
	d.Forget("x")
	if s := d.Silence("x", d0); s.Known {
		t.Errorf("forgotten: %+v", s)
	}
}
