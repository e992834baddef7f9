// Package watchdog is the agent's side of the watchdog fencing level: a
// node's agent pets a hardware watchdog only while it has confirmed,
// recently enough, that no fence order for its boot exists; a fencer that
// wrote one knows the node has reset itself after a wait it can compute
// (core.WatchdogWait). The argument is in docs/design.md ("Watchdog
// evidence").
//
// This file is the rule by which the agent pets, kept free of I/O so that
// it can be walked through every order of events (walk_test.go).
package watchdog

import "time"

// Confirmer decides whether the agent may pet its watchdog. The agent
// reads the API for a fence order of its boot, again and again; a read
// that found none lets it pet for Confirm after the read *started*:
// started after the order was written, the read would have found it (the
// API server's reads are linearizable), so a read that found none started
// before the order — and counting from its start bounds the last pet by
// the order's time plus Confirm, whatever the read's latency. Counting
// from its end would not: a read slow to answer could find no order,
// come back after the order was written, and extend the petting past that
// bound by its own latency.
//
// Once a read found an order for this boot the agent never pets again.
// The zero Confirmer pets nothing until a read has confirmed: a restarted
// agent finds the watchdog armed by its earlier run and must confirm
// before it pets. Times are the agent's monotonic clock (time.Now's
// readings, not wall-clock time). Not safe for concurrent use.
type Confirmer struct {
	// Confirm is T: how long a read that found no order lets the agent
	// pet, from the read's start.
	Confirm time.Duration

	until   time.Time // petting allowed before this
	ordered bool      // a read found an order: never pet again
}

// Read is one read of the API for a fence order, begun with ReadStarted.
type Read struct{ started time.Time }

// ReadStarted begins a read at now, taken before the request is sent.
func (c *Confirmer) ReadStarted(now time.Time) Read { return Read{started: now} }

// NoOrder records that read r found no fence order for this boot: the
// agent may pet until r's start plus Confirm (later than it already may,
// never earlier).
func (c *Confirmer) NoOrder(r Read) {
	if until := r.started.Add(c.Confirm); until.After(c.until) {
		c.until = until
	}
}

// Ordered records that a read found a fence order for this boot: the
// agent stops petting for good, and the watchdog resets the machine.
func (c *Confirmer) Ordered() { c.ordered = true }

// MayPet reports whether the agent may pet its watchdog at now.
func (c *Confirmer) MayPet(now time.Time) bool { return !c.ordered && now.Before(c.until) }
