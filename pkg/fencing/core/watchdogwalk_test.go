package core

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// TestWatchdogLevelWalk plays the watchdog level out end to end, in
// simulated real time: a machine with an armed watchdog and an agent that
// pets it by the agent's rule (a read of the API that found no order for
// its boot lets it pet until T after the read started), its kubelet, the
// API server, and a fencer that steps this core and carries out its
// actions — challenges answered or not, the power Lease, the fence order
// written and seen late, the taint. Each of the machine's agent, its
// watchdog timer, its kubelet and the fencer keeps a clock of its own,
// offset at random and running at a rate within 1 ± WatchdogClockRate.
// Faults, one per run at a random time: the power goes; the agent hangs;
// the node loses the API server but not the fencer, or both; the fencer
// loses the node but the node keeps the API server (a false death: the
// order reaches a live node); nothing at all. After a reset the machine
// stays off or boots again. The invariant: no taint while the boot the
// order was for still runs.
func TestWatchdogLevelWalk(t *testing.T) {
	seed := uint64(1)
	if s := os.Getenv("FENCED_WALK_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	const runs = 2000
	var taints, orders, backs int
	spare := math.Inf(1)
	byFault := map[string]int{}
	for run := 0; run < runs; run++ {
		w := newWatchdogWorld(rand.New(rand.NewPCG(seed, uint64(run))))
		res := w.run()
		orders += res.orders
		if res.taintAt > 0 {
			taints++
			byFault[w.fault]++
			if res.taintAt < w.resetAt || res.resetBy < w.resetAt {
				t.Fatalf("run %d (%s; T %s, W %s): the wait ended at %.3f s and the taint went out at %.3f s, but boot-1 ran until %.3f s", run, w.fault,
					w.arm.Confirm, w.arm.Timeout, res.resetBy, res.taintAt, w.resetAt)
			}
			spare = min(spare, res.resetBy-w.resetAt)
		}
		if res.back {
			backs++
		}
	}
	if taints < runs/4 || orders < runs/3 || backs == 0 {
		t.Fatalf("the walk reached %d taints, %d orders, %d boots back of %d runs: it tests too little", taints, orders, backs, runs)
	}
	t.Logf("%d runs: %d orders written, %d taints (%v), each after the boot had ended (the closest wait ended %.3f s after the reset); %d machines back in another boot",
		runs, orders, taints, byFault, spare, backs)
}

// walkTick is the simulation's step of real time, in seconds.
const walkTick = 0.01

// walkClock is one machine's clock: an offset, and a rate within 1 ± ρ.
type walkClock struct{ offset, rate float64 }

func newWalkClock(rng *rand.Rand) walkClock {
	return walkClock{offset: rng.Float64() * 1e5, rate: 1 + WatchdogClockRate*(2*rng.Float64()-1)}
}

// at is the clock's reading at real time real, in seconds.
func (c walkClock) at(real float64) float64 { return c.offset + c.rate*real }

func asTime(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// watchdogWorld is one run.
type watchdogWorld struct {
	rng   *rand.Rand
	arm   WatchdogArm
	fault string
	// faultAt is the real time of the fault; comeBack how long after its
	// reset the machine boots again (0: it stays off).
	faultAt, comeBack                               float64
	agentClock, dogClock, kubeletClock, fencerClock walkClock

	// The machine: resetAt is when boot-1 ended (+Inf while it runs).
	resetAt float64
	// The agent: the start of its next read, the read under way (its
	// start by its clock, when it takes effect and when its answer
	// arrives, real), the allowance, and whether it read an order.
	nextRead                      float64
	readStart, readEffect, readAt float64
	reading, ordered              bool
	allowUntil                    float64 // agent clock
	lastPet                       float64 // real
	// The kubelet's last renewal (its clock) and when the fencer sees it.
	renew, renewSeenAt, lastRenewReal float64
	nextRenew                         float64
	// The fence order: written at (real; +Inf: none) and seen by the
	// fencer at its step after orderSeenAt (real): at seen, by its clock,
	// with the kubelet's renewal it knew then.
	orderAt, orderSeenAt float64
	seen, seenRenew      time.Time
	// orderPending: the order is to land just after the agent's next read
	// takes effect, at its very start — the read that just missed it — and
	// the node to lose the API server then, so that no read after it gets
	// through and the agent pets on to the end of that read's allowance;
	// the fencer sees the order at once (cutAtOrder). The worst case.
	orderPending, cutAtOrder bool
	// The power Lease (the only fencer's) and its challenge under way.
	leaseHeld                bool
	challengeSent, answerDue float64
	challenging              bool
	agentObs                 AgentObs
	back                     bool
	bootNow                  string
	backAt                   float64
	orders                   int
}

func newWatchdogWorld(rng *rand.Rand) *watchdogWorld {
	w := &watchdogWorld{rng: rng, resetAt: math.Inf(1), orderAt: math.Inf(1), orderSeenAt: math.Inf(1), bootNow: "boot-1"}
	w.arm = WatchdogArm{BootID: "boot-1", Confirm: time.Duration(5+rng.IntN(56)) * time.Second, Timeout: time.Duration(3+rng.IntN(28)) * time.Second}
	w.fault = []string{"power loss", "agent hangs", "node loses the API", "node cut off", "false death", "false death", "nothing"}[rng.IntN(7)]
	w.faultAt = 20 + 40*rng.Float64()
	if rng.IntN(2) == 0 {
		w.comeBack = 5 + 60*rng.Float64()
	}
	w.agentClock, w.dogClock, w.kubeletClock, w.fencerClock = newWalkClock(rng), newWalkClock(rng), newWalkClock(rng), newWalkClock(rng)
	w.allowUntil = w.agentClock.at(0) + w.arm.Confirm.Seconds() // armed after a read that found nothing
	w.nextRenew = 10 * rng.Float64()
	w.renew, w.renewSeenAt, w.lastRenewReal = w.kubeletClock.at(-1), 0, -1
	return w
}

// The fault's effects at real time t. A false death: the fencer cannot
// reach the node and its kubelet has stopped (crashed), but its agent runs
// and reads the API — an order reaches a live machine. A machine back in
// boot-2 answers on every channel.
func (w *watchdogWorld) up(t float64) bool      { return t < w.resetAt }
func (w *watchdogWorld) inBoot2(t float64) bool { return w.back && t >= w.backAt+3 }
func (w *watchdogWorld) faulty(t float64) bool  { return t >= w.faultAt }
func (w *watchdogWorld) agentRuns(t float64) bool {
	return w.inBoot2(t) || w.up(t) && !(w.fault == "agent hangs" && w.faulty(t))
}
func (w *watchdogWorld) nodeReachesAPI(t float64) bool {
	return w.up(t) && !((w.fault == "node loses the API" || w.fault == "node cut off") && w.faulty(t)) &&
		!(w.cutAtOrder && t >= w.orderAt)
}
func (w *watchdogWorld) kubeletRenews(t float64) bool {
	return w.nodeReachesAPI(t) && !(w.fault == "false death" && w.faulty(t))
}
func (w *watchdogWorld) fencerReachesNode(t float64) bool {
	return w.inBoot2(t) || w.agentRuns(t) && !((w.fault == "node cut off" || w.fault == "false death") && w.faulty(t))
}

type walkResult struct {
	// taintAt is when the taint went out, resetBy when the fencer's wait
	// ended (real time; 0 without a taint).
	taintAt, resetBy float64
	orders           int
	back             bool
}

func (w *watchdogWorld) run() walkResult {
	p := DefaultPolicy()
	tgt := &Target{Name: "node-a"}
	nextStep := 0.0
	for t := 0.0; t < 300; t += walkTick {
		if w.fault == "power loss" && t >= w.faultAt && w.up(t) {
			w.resetAt = t
		}
		w.machine(t)
		if w.comeBack > 0 && !w.up(t) && w.bootNow == "boot-1" && t >= w.resetAt+w.comeBack {
			w.bootNow, w.back, w.backAt = "boot-2", true, t
		}
		w.challenge(t)
		if t < nextStep && (t < w.orderSeenAt || !w.seen.IsZero()) {
			continue
		}
		nextStep = t + 0.1 + 0.9*w.rng.Float64()
		o := w.observe(t)
		d := tgt.Step(o, p)
		for _, a := range d.Actions {
			switch a.Kind {
			case ActApplyTaint:
				if a.Evidence.Method != vocab.EvidenceWatchdog {
					panic(fmt.Sprintf("tainted with %s", a.Evidence.Method))
				}
				if err := a.Evidence.Validate(); err != nil {
					panic(err)
				}
				// When the fencer's wait ended, in real time.
				resetBy := (float64(a.Evidence.Watchdog.ResetBy().Sub(t0))/float64(time.Second) - w.fencerClock.offset) / w.fencerClock.rate
				return walkResult{taintAt: t, resetBy: resetBy, orders: w.orders, back: w.back}
			case ActAcquireLease:
				w.leaseHeld = true
			case ActReleaseLease:
				w.leaseHeld = false
			case ActOrderReset:
				switch {
				case !math.IsInf(w.orderAt, 1) || w.orderPending || w.rng.IntN(10) == 0:
					// Written already, or the write fails (one in ten).
				case w.rng.IntN(2) == 0:
					// The worst case, written as the agent's next read
					// takes effect (machine).
					w.orderPending = true
					w.orders++
				default:
					w.orderAt = t + 0.5*w.rng.Float64()
					w.orderSeenAt = w.orderAt + w.rng.Float64()
					w.orders++
				}
			case ActWithdrawOrder:
				w.orderAt, w.orderSeenAt = math.Inf(1), math.Inf(1)
			case ActChallenge:
				if !w.challenging {
					w.challenging, w.challengeSent = true, t
					w.answerDue = t + 0.002 + 0.05*w.rng.Float64()
				}
			}
		}
	}
	return walkResult{orders: w.orders, back: w.back}
}

// machine moves the agent, its watchdog and the kubelet on by one tick.
func (w *watchdogWorld) machine(t float64) {
	if !w.up(t) {
		return
	}
	if w.agentRuns(t) && !w.ordered {
		if !w.reading && w.agentClock.at(t) >= w.nextRead {
			// A read starts; it takes effect at any point of its latency
			// (up to 2 s), and its answer arrives after that.
			w.reading, w.readStart = true, w.agentClock.at(t)
			w.readEffect = t + 2*w.rng.Float64()
			w.readAt = w.readEffect + w.rng.Float64()
			if w.orderPending {
				w.readEffect, w.orderPending, w.cutAtOrder = t, false, true
				w.orderAt, w.orderSeenAt = t+walkTick/2, t+walkTick/2
			}
			w.nextRead = w.readStart + w.arm.Confirm.Seconds()/3
		}
		if w.reading && t >= w.readAt {
			w.reading = false
			switch {
			case !w.nodeReachesAPI(w.readEffect) || !w.nodeReachesAPI(t) && !w.cutAtOrder:
				// No answer: nothing confirmed. (The answer of the read
				// that just missed the order gets through: the worst case.)
			case w.orderAt <= w.readEffect && w.bootNow == "boot-1":
				w.ordered = true
			default:
				w.allowUntil = max(w.allowUntil, w.readStart+w.arm.Confirm.Seconds())
			}
		}
		if w.agentClock.at(t) < w.allowUntil {
			w.lastPet = t
		}
	}
	// The watchdog resets W after the last pet, by its own timer.
	if w.dogClock.at(t)-w.dogClock.at(w.lastPet) >= w.arm.Timeout.Seconds() {
		w.resetAt = t
		return
	}
	if w.kubeletRenews(t) && t >= w.nextRenew {
		w.renew, w.lastRenewReal = w.kubeletClock.at(t), t
		w.renewSeenAt = t + 0.3*w.rng.Float64()
		w.nextRenew = t + 10
	}
}

// challenge settles the liveness challenge under way: answered when the
// fencer reaches a running agent, else silent once its wait is over.
func (w *watchdogWorld) challenge(t float64) {
	if !w.challenging || t < w.answerDue {
		return
	}
	a := &w.agentObs
	if w.fencerReachesNode(w.challengeSent) && w.fencerReachesNode(t) {
		w.challenging = false
		*a = AgentObs{LastProof: asTime(w.fencerClock.at(t))}
		return
	}
	if t < w.challengeSent+DefaultPolicy().SilentChallengeTimeout.Seconds() {
		return
	}
	w.challenging = false
	sent := asTime(w.fencerClock.at(w.challengeSent))
	if a.SilentSince.IsZero() || a.LastProof.After(a.SilentSince) {
		a.SilentSince = sent
	}
	a.LastSilent, a.SilentUntil = sent, asTime(w.fencerClock.at(t))
}

// observe is the fencer's view at real time t: a 5-node cluster, the
// node's power devices none, its watchdog level armed for boot-1.
func (w *watchdogWorld) observe(t float64) Observation {
	now := asTime(w.fencerClock.at(t))
	o := Observation{Now: now, Cluster: ClusterObs{Nodes: 5, GossipAlive: 5, LeaseHeld: w.leaseHeld}}
	o.Node = NodeObs{Exists: true, Ready: ReadyTrue, ReadySince: t0, BootID: "boot-1", SystemUUID: nodeUUID}
	if t >= w.renewSeenAt {
		o.Node.KubeletRenew = asTime(w.renew)
	}
	if t-w.lastRenewReal > 40 {
		o.Node.Ready, o.Node.ReadySince = ReadyUnknown, asTime(w.fencerClock.at(w.lastRenewReal+40))
	}
	o.Member = MemberObs{Known: true, State: vocab.MemberAlive, Since: t0, BootID: "boot-1", Announced: vocab.AnnounceRunning, Signed: true}
	if w.inBoot2(t) {
		// Boot-2 answers on every channel.
		o.Node.BootID, o.Node.Ready, o.Node.ReadySince = "boot-2", ReadyTrue, asTime(w.fencerClock.at(w.backAt+3))
		o.Member.BootID, o.Member.Since = "boot-2", asTime(w.fencerClock.at(w.backAt+3))
	} else if !w.fencerReachesNode(t) {
		o.Member.Silent, o.Member.SilentSince = true, asTime(w.fencerClock.at(min(t, w.faultAt, w.resetAt)))
		if t > min(w.faultAt, w.resetAt)+3 {
			o.Member.State, o.Member.Since = vocab.MemberDead, asTime(w.fencerClock.at(min(w.faultAt, w.resetAt)+3))
		}
		o.Cluster.GossipAlive, o.Cluster.Unhealthy = 4, 1
	}
	o.Agent = w.agentObs
	o.Agent.Challenging = w.challenging
	arm := w.arm
	o.Watchdog = WatchdogObs{Level: 1, Arm: &arm}
	if t >= w.orderSeenAt {
		if w.seen.IsZero() {
			w.seen, w.seenRenew = now, o.Node.KubeletRenew
		}
		o.Watchdog.Order = &FenceOrder{BootID: "boot-1", SeenAt: w.seen, KubeletRenewAtSeen: w.seenRenew}
	} else {
		w.seen = time.Time{}
	}
	return o
}
