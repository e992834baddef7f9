package soak

import (
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
)

// Live says whether node's machine could still write when it was tainted
// with ev: running the boot the evidence is about, and not shutting down
// cleanly. The driver answers from what it knows of its machines.
type Live func(node string, ev core.Evidence) (live bool, why string)

// Checker checks the invariants on every change of a Node or of a power
// Lease (fed by informers): a taint appears only with valid evidence, only
// on a machine that is off, and no fencer takes a power Lease another one
// still holds. It also keeps when each node was tainted and untainted, for
// the driver's recovery figures. Violations are kept, with what was seen,
// for the summary and the log.
type Checker struct {
	live Live
	now  func() time.Time

	mu sync.Mutex
	// tainted: nodes with the out-of-service taint now, since when.
	tainted map[string]time.Time
	// taints: every appearance of the taint, by node.
	taints     map[string][]time.Time
	untainted  map[string][]time.Time
	withEv     int
	violations []Violation
}

// Invariant names a property the soak must never see broken.
type Invariant string

// The invariants.
const (
	TaintWithoutEvidence Invariant = "taint without evidence"
	TaintOnLiveMachine   Invariant = "taint on a live machine"
	OverlappingWriters   Invariant = "overlapping writers"
	TaintLeftBehind      Invariant = "taint left behind"
	PowerLossNotFenced   Invariant = "power loss never tainted"
)

// Violation is one broken invariant.
type Violation struct {
	At        time.Time
	Invariant Invariant
	Node      string
	Detail    string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s: %s (%s)", v.At.Format(time.RFC3339Nano), v.Invariant, v.Node, v.Detail)
}

// NewChecker returns a Checker that asks live about every new taint.
func NewChecker(live Live) *Checker {
	return &Checker{live: live, now: time.Now, tainted: map[string]time.Time{},
		taints: map[string][]time.Time{}, untainted: map[string][]time.Time{}}
}

// ObserveNode takes a Node as an informer delivers it (add or update; nil
// after a delete). A taint that was not there before is checked.
func (c *Checker) ObserveNode(n *corev1.Node) {
	if n == nil {
		return
	}
	now := c.now()
	has := taint.HasTaint(n)
	c.mu.Lock()
	_, had := c.tainted[n.Name]
	switch {
	case has && !had:
		c.tainted[n.Name] = now
		c.taints[n.Name] = append(c.taints[n.Name], now)
	case !has && had:
		delete(c.tainted, n.Name)
		c.untainted[n.Name] = append(c.untainted[n.Name], now)
	}
	c.mu.Unlock()
	if has && !had {
		c.checkTaint(n, now)
	}
}

// checkTaint checks a taint just seen: fenced's (AnnotationAppliedBy),
// with evidence that parses and passes core.Evidence.Validate, on a machine
// that cannot write.
func (c *Checker) checkTaint(n *corev1.Node, at time.Time) {
	ev, ok, err := taint.EvidenceOf(n)
	switch {
	case !taint.AppliedByFenced(n):
		c.violate(at, TaintWithoutEvidence, n.Name, "out-of-service taint without "+taint.AnnotationAppliedBy)
		return
	case err != nil || !ok:
		c.violate(at, TaintWithoutEvidence, n.Name, fmt.Sprintf("evidence annotation present=%v: %v", ok, err))
		return
	}
	if err := ev.Validate(); err != nil {
		c.violate(at, TaintWithoutEvidence, n.Name, err.Error())
		return
	}
	c.mu.Lock()
	c.withEv++
	c.mu.Unlock()
	if c.live == nil {
		return
	}
	if live, why := c.live(n.Name, ev); live {
		c.violate(at, TaintOnLiveMachine, n.Name, fmt.Sprintf("%s evidence by %s for boot %s: %s", ev.Method, ev.By, ev.BootID, why))
	}
}

// ObserveLeaseChange takes an update of a power Lease: a new holder while
// the old one's Lease had not run out means two fencers acting on one node.
func (c *Checker) ObserveLeaseChange(old, cur *coordinationv1.Lease) {
	if old == nil || cur == nil {
		return
	}
	prev, next := holder(old), holder(cur)
	if prev == "" || next == "" || prev == next {
		return
	}
	if old.Spec.RenewTime == nil || old.Spec.LeaseDurationSeconds == nil || cur.Spec.AcquireTime == nil {
		return
	}
	expires := old.Spec.RenewTime.Add(time.Duration(*old.Spec.LeaseDurationSeconds) * time.Second)
	if cur.Spec.AcquireTime.Time.Before(expires) {
		c.violate(c.now(), OverlappingWriters, cur.Name, fmt.Sprintf("%s took the power Lease at %s while %s held it until %s",
			next, cur.Spec.AcquireTime.Format(time.RFC3339Nano), prev, expires.Format(time.RFC3339Nano)))
	}
}

// Violate records a violation the driver found itself (volume overlaps,
// taints left behind, power losses never fenced).
func (c *Checker) Violate(inv Invariant, node, detail string) { c.violate(c.now(), inv, node, detail) }

func (c *Checker) violate(at time.Time, inv Invariant, node, detail string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, Violation{At: at, Invariant: inv, Node: node, Detail: detail})
}

// TaintedSince returns when node's current taint appeared (ok false: not
// tainted now).
func (c *Checker) TaintedSince(node string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tainted[node]
	return t, ok
}

// TaintedAfter returns the first appearance of node's taint at or after t.
func (c *Checker) TaintedAfter(node string, t time.Time) (time.Time, bool) {
	return firstAfter(c, c.taints, node, t)
}

// UntaintedAfter returns the first removal of node's taint at or after t.
func (c *Checker) UntaintedAfter(node string, t time.Time) (time.Time, bool) {
	return firstAfter(c, c.untainted, node, t)
}

func firstAfter(c *Checker, m map[string][]time.Time, node string, t time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, at := range m[node] {
		if !at.Before(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// Tainted lists the nodes tainted now.
func (c *Checker) Tainted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for n := range c.tainted {
		out = append(out, n)
	}
	return out
}

// TaintsWithEvidence counts the taints that came with valid evidence.
func (c *Checker) TaintsWithEvidence() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.withEv
}

// Violations returns the violations so far.
func (c *Checker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Violation(nil), c.violations...)
}

// Count counts the violations of inv.
func (c *Checker) Count(inv Invariant) int {
	n := 0
	for _, v := range c.Violations() {
		if v.Invariant == inv {
			n++
		}
	}
	return n
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
