package watchdog

import (
	"testing"
	"time"
)

// TestConfirmer: the agent pets only until T after the start of its last
// read that found no order, never before its first, and never again once
// a read found one.
func TestConfirmer(t *testing.T) {
	const T = 30 * time.Second
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		steps func(c *Confirmer)
		at    time.Duration // MayPet at t0 + at
		want  bool
	}{
		{"no read yet (a restarted agent too)", func(c *Confirmer) {}, 0, false},
		{"read started at t0 found none: just before t0+T", func(c *Confirmer) { c.NoOrder(c.ReadStarted(t0)) }, T - time.Nanosecond, true},
		{"read started at t0 found none: at t0+T", func(c *Confirmer) { c.NoOrder(c.ReadStarted(t0)) }, T, false},
		{"an older read answering late does not shorten it", func(c *Confirmer) {
			old := c.ReadStarted(t0)
			c.NoOrder(c.ReadStarted(t0.Add(10 * time.Second)))
			c.NoOrder(old)
		}, T + 5*time.Second, true},
		{"a read found an order", func(c *Confirmer) {
			c.NoOrder(c.ReadStarted(t0))
			c.Ordered()
		}, time.Second, false},
		{"a later read finding none does not undo the order", func(c *Confirmer) {
			c.Ordered()
			c.NoOrder(c.ReadStarted(t0))
		}, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Confirmer{Confirm: T}
			tt.steps(c)
			if got := c.MayPet(t0.Add(tt.at)); got != tt.want {
				t.Errorf("MayPet(t0+%s) = %v, want %v", tt.at, got, tt.want)
			}
		})
	}
}
