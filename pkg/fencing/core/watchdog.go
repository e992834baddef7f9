package core

import (
	"math"
	"time"
)

// WatchdogArm is what a node's agent states, signed with its own key for
// its current boot, of the hardware watchdog it armed: the watchdog level's
// precondition (docs/design.md, "Watchdog evidence").
type WatchdogArm struct {
	// BootID is the boot the watchdog was armed in.
	BootID string
	// Timeout is W, the watchdog's timeout as its driver set it: the
	// machine resets W after the last pet.
	Timeout time.Duration
	// Confirm is T: the agent pets only while a read of the API that found
	// no fence order for its boot started less than T ago
	// (watchdog.Confirmer).
	Confirm time.Duration
}

// WatchdogClockRate bounds how far each clock the watchdog argument
// counts on may run fast or slow — the agent's, the watchdog's and the
// fencer's, each measuring a duration, never comparing a time with another
// machine's: 1 %. Quartz oscillators are within 0.01 %; the bound leaves
// room for the crudest watchdog timers and for virtual machines.
const WatchdogClockRate = 0.01

// WatchdogResetMargin is added to the wait for what the argument does not
// time: a pet on its way to the device as its allowance ends, and the
// reset itself once the watchdog fires.
const WatchdogResetMargin = 2 * time.Second

// WatchdogWait is how long after a fencer first saw a fence order for a
// node's boot in the API, by its own clock, the node has been reset by its
// watchdog, armed as a says. The order was written at c, before it was
// seen. Every read of the API that started after c finds it (the API
// server's reads are linearizable, and the order stays until the node is
// back in another boot), so the agent's last read that found no order
// started before c, and it pets until T after that by its clock: before
// c + T/(1−ρ). The watchdog resets W after the last pet by its own timer:
// before c + (T+W)/(1−ρ). The fencer's clock measures its wait at a rate
// of at least 1/(1+ρ): waiting (T+W)(1+ρ)/(1−ρ) by it from when it saw
// the order, after c, is enough. watchdog's walk test plays this out over
// random clocks, reads, outages and hangs.
func WatchdogWait(a WatchdogArm) time.Duration {
	tw := float64(a.Confirm + a.Timeout)
	return time.Duration(math.Ceil(tw*(1+WatchdogClockRate)/(1-WatchdogClockRate))) + WatchdogResetMargin
}
