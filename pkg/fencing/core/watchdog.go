package core

import (
	"encoding/json"
	"fmt"
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
	// Device is the watchdog as its driver names itself ("i6300ESB timer",
	// "Software Watchdog"); Software says it is a software watchdog — a
	// kernel timer that a hung kernel never runs — which a level accepts
	// only when told to, and which every piece of evidence then names.
	Device   string
	Software bool
}

// WatchdogObs is what a fencer knows of a node's watchdog level.
type WatchdogObs struct {
	// Level is the number of the node's watchdog level in its fencing
	// topology (from 1); 0 when it has none — the operator did not opt
	// the node in, and nothing below is looked at.
	Level int
	// Arm is the node's armed statement for its current boot, its
	// signature checked against the key the node published for that boot;
	// nil when there is none or it was refused (Refused says why: a bad
	// signature, another boot's, a software watchdog the level does not
	// accept).
	Arm     *WatchdogArm
	Refused string
	// Order is the fence order for the node as this fencer sees it in the
	// API; nil when there is none.
	Order *FenceOrder
}

// FenceOrder is a fence order for one boot of a node: its agent stops
// petting its watchdog once it reads it. Only fencers may write or delete
// one, and it stays until the node is seen in another boot.
type FenceOrder struct {
	// BootID is the boot the order is for.
	BootID string
	// SeenAt is when this fencer first saw this order object in the API,
	// by its own clock: the order was written before, so the wait counts
	// from here. A new object (deleted and written again) is a new order.
	SeenAt time.Time
	// KubeletRenewAtSeen is the renew time of the node's kubelet Lease the
	// fencer knew when it first saw the order: a later renewal is a sign
	// of life after the order (same clock on both sides: the kubelet's).
	KubeletRenewAtSeen time.Time
}

// WatchdogWaited is the wait watchdog evidence rests on, as the Node's
// evidence annotation records it.
type WatchdogWaited struct {
	// Timeout (W) and Confirm (T), as the node's armed statement said them
	// (the longest of them seen for the boot), and Device and Software as
	// it named its watchdog.
	Timeout  Duration `json:"timeout"`
	Confirm  Duration `json:"confirm"`
	Device   string   `json:"device,omitempty"`
	Software bool     `json:"software,omitempty"`
	// OrderSeenAt is when the fencer first saw the fence order, and Wait
	// how long it waited from then (WatchdogWait): the node was reset by
	// OrderSeenAt + Wait.
	OrderSeenAt time.Time `json:"orderSeenAt"`
	Wait        Duration  `json:"wait"`
	// KubeletLeaseRenewedAt is the renew time of the node's kubelet Lease
	// the fencer knew when it saw the order: a later renewal voids the
	// evidence.
	KubeletLeaseRenewedAt time.Time `json:"kubeletLeaseRenewedAt,omitzero"`
}

// ResetBy is when, by the fencer's clock, the node has been reset.
func (w WatchdogWaited) ResetBy() time.Time { return w.OrderSeenAt.Add(time.Duration(w.Wait)) }

// Duration is a time.Duration written in JSON as Go spells it ("10s"), so
// that a person reading a Node's evidence annotation reads seconds.
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"10s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// The watchdog level's defaults (the watchdog section of the
// configuration file): W 10 s — long enough for an agent starved of CPU
// for seconds, short beside T; T 30 s — longer than an API server's
// restart, and a third of it between reads: 40 s together, a wait of
// 42.8 s (WatchdogWait), which with the order written ~13 s after a power
// loss (WatchdogOrderAfter) taints the node ~56 s after it.
const (
	DefaultWatchdogTimeout = 10 * time.Second
	DefaultWatchdogConfirm = 30 * time.Second
)

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
