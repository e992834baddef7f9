package watchdog

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"fenced.io/fenced/pkg/fencing/core"
)

// The walk plays out the watchdog level's argument (core.WatchdogWait) in
// simulated real time, a step at a time: a fencer writes a fence order for
// a node's boot and, having seen it, waits; the node's agent reads the API
// for orders and pets its watchdog whenever Confirmer allows — at every
// step it may, the most a live agent can; its watchdog resets the machine
// W after the last pet. Each of the three keeps its own clock, offset at
// random and running at rates that drift within core.WatchdogClockRate.
// The API server goes away now and then, reads take up to seconds and
// take effect at any point of their latency, the agent hangs or dies.
// Whatever happens, the machine must have reset when the fencer's wait
// ends.

// walkStep is the simulation's time step, in seconds.
const walkStep = 0.002

// driftingClock is one machine's clock: an offset, and a rate that changes
// now and then within 1 ± ρ.
type driftingClock struct {
	now, rate, next float64 // reading, rate, real time of the next change
	rng             *rand.Rand
	extreme         float64 // when not 0, the rate always (1 ± ρ at the edge)
}

func newDriftingClock(rng *rand.Rand, extreme float64) *driftingClock {
	c := &driftingClock{now: rng.Float64() * 1e6, rng: rng, extreme: extreme}
	c.drift(0)
	return c
}

func (c *driftingClock) drift(real float64) {
	c.rate = c.extreme
	if c.extreme == 0 {
		c.rate = 1 + core.WatchdogClockRate*(2*c.rng.Float64()-1)
	}
	c.next = real + 1 + 29*c.rng.Float64()
}

// tick advances the clock by one step of real time ending at real.
func (c *driftingClock) tick(real float64) {
	c.now += c.rate * walkStep
	if real >= c.next {
		c.drift(real)
	}
}

// at converts the clock's reading to the time.Time the agent's code sees.
func (c *driftingClock) at() time.Time {
	return time.Unix(0, 0).Add(time.Duration(c.now * float64(time.Second)))
}

// span is an interval of real time.
type span struct{ from, to float64 }

func inAny(spans []span, t float64) bool {
	for _, s := range spans {
		if t >= s.from && t < s.to {
			return true
		}
	}
	return false
}

// walk is one run's world.
type walk struct {
	arm core.WatchdogArm
	// The order is written at order (real time) or, when orderAtRead is
	// not 0, orderDelay after the agent's orderAtRead-th read started: the
	// worst case, a read that just missed it.
	order       float64
	orderAtRead int
	orderDelay  float64
	seenLag     float64 // from the order until the fencer sees it
	every       float64 // the agent's reads, by its clock
	maxLatency  float64 // of a read
	outages     []span  // the API server does not answer
	hangs       []span  // the agent does nothing
	// From the order on, for this long, the node is cut off from the API
	// server (it cannot see the order, nor confirm there is none: the case
	// the level is for), or its agent hangs.
	cutAtOrder, hangAtOrder float64
	crash                   float64 // the agent dies (0: never)
	extremeRates            bool    // agent and watchdog slow, fencer fast: the bound's worst case
}

func randomWalk(rng *rand.Rand) walk {
	secs := func(lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }
	d := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	T, W := secs(2, 40), secs(1, 20)
	w := walk{
		arm:          core.WatchdogArm{Confirm: d(T), Timeout: d(W)},
		order:        secs(0, 3*T),
		every:        secs(T/10, T/2),
		maxLatency:   secs(0, min(T/4, 5)),
		extremeRates: rng.IntN(3) == 0,
	}
	if rng.IntN(2) == 0 {
		w.orderAtRead, w.orderDelay = 1+rng.IntN(5), secs(0, 0.3)
	}
	if rng.IntN(2) == 0 {
		w.seenLag = secs(0, 5)
	}
	switch rng.IntN(3) {
	case 0:
		w.cutAtOrder = secs(0, 3*(T+W))
	case 1:
		w.hangAtOrder = secs(0, 3*(T+W))
	}
	for range rng.IntN(3) {
		from := secs(0, w.order+T+W)
		w.outages = append(w.outages, span{from, from + secs(0, 2*T)})
	}
	for range rng.IntN(2) {
		from := secs(0, w.order+T+W)
		w.hangs = append(w.hangs, span{from, from + secs(0, 2*(T+W))})
	}
	if rng.IntN(5) == 0 {
		w.crash = secs(0, w.order+T+W)
	}
	return w
}

// mutation changes the rule the walk plays, to show that the walk finds
// what each part of the rule prevents.
type mutation int

const (
	asBuilt          mutation = iota
	noRateAllowance           // the fencer waits T + W, as if clocks were exact
	confirmFromReply          // the agent counts T from a read's reply, not its start
)

// play runs w and returns how far (seconds, by real time) the machine's
// reset came after the fencer's wait ended; ≤ 0 is safe.
func (w walk) play(rng *rand.Rand, m mutation) float64 {
	var agentRate, dogRate, fencerRate float64
	if w.extremeRates {
		agentRate, dogRate, fencerRate = 1-core.WatchdogClockRate, 1-core.WatchdogClockRate, 1+core.WatchdogClockRate
	}
	agent, dog, fencer := newDriftingClock(rng, agentRate), newDriftingClock(rng, dogRate), newDriftingClock(rng, fencerRate)
	wait := (core.WatchdogWait(w.arm) - core.WatchdogResetMargin).Seconds() // the walk's reset takes no time
	if m == noRateAllowance {
		wait = (w.arm.Confirm + w.arm.Timeout).Seconds()
	}
	c := Confirmer{Confirm: w.arm.Confirm}
	var (
		reading         bool
		read            Read
		readEnd, effect float64 // reply, and when the read took effect at the API
		readFailed      bool
		reads           int
		nextRead        = agent.now // by the agent's clock
		lastPetDog      = dog.now   // the watchdog's reading at the last pet (armed at 0)
		order           = w.order
		waited          float64 // by the fencer's clock, since it saw the order
		waitEnded       = -1.0  // real time the fencer's wait ended, the machine up
	)
	if w.orderAtRead > 0 {
		order = -1 // set when that read starts
	}
	written := func(t float64) bool { return order >= 0 && t >= order }
	cut := func(t float64) bool {
		return inAny(w.outages, t) || (written(t) && t < order+w.cutAtOrder)
	}
	for real := 0.0; ; real += walkStep {
		agent.tick(real)
		dog.tick(real)
		fencer.tick(real)
		if dog.now-lastPetDog >= w.arm.Timeout.Seconds() {
			if waitEnded >= 0 {
				return real - waitEnded // unsafe: reset after the wait ended
			}
			return -(wait - waited) / fencer.rate // safe, by this much
		}
		if waitEnded >= 0 && real-waitEnded > 1000 {
			return 1000 // still up: the agent pets on
		}
		if written(real) && real >= order+w.seenLag && waitEnded < 0 {
			if waited += fencer.rate * walkStep; waited >= wait {
				waitEnded = real
			}
		}
		hung := inAny(w.hangs, real) || (written(real) && real < order+w.hangAtOrder)
		if (w.crash != 0 && real >= w.crash) || hung {
			continue
		}
		switch {
		case reading && real >= readEnd:
			reading = false
			switch {
			case readFailed:
			case written(effect):
				c.Ordered()
			default:
				c.NoOrder(read)
			}
		case !reading && agent.now >= nextRead:
			reading, reads = true, reads+1
			if reads == w.orderAtRead {
				order = real + w.orderDelay
			}
			latency := w.maxLatency * rng.Float64()
			readEnd, effect = real+latency, real+latency*rng.Float64()
			readFailed = cut(real) || cut(effect)
			read = c.ReadStarted(agent.at())
			if m == confirmFromReply {
				// The reply's time, by the agent's clock.
				read = c.ReadStarted(agent.at().Add(time.Duration(latency * agent.rate * float64(time.Second))))
			}
			nextRead = agent.now + w.every
		}
		if c.MayPet(agent.at()) {
			lastPetDog = dog.now
		}
	}
}

// TestWalk: under every walk the machine has reset when the fencer's wait
// (core.WatchdogWait) ends; and the walk finds the unsafe runs of a wait
// without the clock-rate allowance, and of an agent that counts from a
// read's reply.
func TestWalk(t *testing.T) {
	runs := 2000
	if testing.Short() {
		runs = 100
	}
	for _, tc := range []struct {
		m        mutation
		name     string
		wantSafe bool
	}{
		{asBuilt, "as built", true},
		{noRateAllowance, "the fencer waits T+W", false},
		{confirmFromReply, "the agent counts from a read's reply", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unsafe := 0
			worst, worstSeed := -1e9, uint64(0)
			for seed := uint64(1); seed <= uint64(runs); seed++ {
				rng := rand.New(rand.NewPCG(seed, 27))
				w := randomWalk(rng)
				late := w.play(rng, tc.m)
				if late > walkStep {
					unsafe++
					if tc.wantSafe {
						t.Errorf("seed %d: the machine was still up when the fencer's wait ended (%+v)", seed, w)
					}
				}
				if late > worst {
					worst, worstSeed = late, seed
				}
			}
			t.Logf("%d runs, %d unsafe; the closest reset to the wait's end: %s (seed %d)", runs, unsafe, fmtSecs(worst), worstSeed)
			if !tc.wantSafe && unsafe == 0 {
				t.Errorf("no unsafe run found: the walk does not exercise what this rule prevents")
			}
		})
	}
}

func fmtSecs(s float64) string {
	if s >= 0 {
		return fmt.Sprintf("%.3f s after", s)
	}
	return fmt.Sprintf("%.3f s before", -s)
}
