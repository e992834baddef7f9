package device

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"fenced.io/fenced/pkg/vocab"
)

// Plugs the device does not have. fence_apc_snmp reads an outlet number
// the PDU lacks as off: the SNMP get answers noSuchInstance, which the
// agent compares with "on". A plug mistyped in the configuration — 25 on a
// 24-outlet PDU, or the outlets of the PDU in the next rack — would read
// off for a running node, and the whole rule of evidence rests on a power
// device that reads off. So an off reading of a plug is used only when the
// device's own list (the agent's list action) names that plug, by ID or by
// alias. The list is kept, and read again whenever a plug is not in it
// (an outlet renamed since); the device monitor reads it too, so that the
// first fence rarely waits for it. An agent that cannot list, or lists
// nothing ("N/A", "List option is not working"), cannot be checked: its
// readings are taken as they are, as before.

// outletList is what the device's list action last reported.
type outletList struct {
	mu sync.Mutex
	// names are the IDs and aliases listed; nil until a list succeeded.
	names map[string]bool
	// listing is closed when the list under way ends; nil when none is.
	listing chan struct{}
	err     error
}

// checkPlugListed returns an error when the device's list, read again if
// needed, does not name plug; nil when it does or the agent cannot say.
func (a *FenceAgent) checkPlugListed(ctx context.Context, node, plug string) error {
	if !a.canList || plug == "" {
		return nil
	}
	names, err := a.outletNames(ctx, false)
	if err == nil && names != nil && !names[plug] {
		names, err = a.outletNames(ctx, true)
	}
	switch {
	case err != nil:
		return a.failPlug(node, plug, vocab.OpPowerStatus, KindOf(err), fmt.Errorf(
			"reads off, but the device's outlet list — which must name a plug before an off reading of it is used — could not be read: %w", causeOf(err)), nil)
	case len(names) == 0 || names[plug]:
		return nil
	}
	listed := slices.Sorted(maps.Keys(names))
	if len(listed) > 12 {
		listed = append(listed[:12], "…")
	}
	return a.failPlug(node, plug, vocab.OpPowerStatus, vocab.KindNoSuchPlug, fmt.Errorf(
		"reads off, but the device lists no outlet %q (it lists %s), and fence agents read an outlet the device lacks as off: not evidence; fix the plug in fenceDevices[].plugs",
		plug, strings.Join(listed, ", ")), nil)
}

// outletNames returns the IDs and aliases the device lists, reading the
// list when it never was or again is set; reads of one device share one
// run.
func (a *FenceAgent) outletNames(ctx context.Context, again bool) (map[string]bool, error) {
	l := &a.outlets
	l.mu.Lock()
	if l.names != nil && !again && l.listing == nil {
		names := l.names
		l.mu.Unlock()
		return names, nil
	}
	wait := l.listing
	if wait == nil {
		wait = make(chan struct{})
		l.listing = wait
		go func() {
			// Bounded by the agent's own timeout and retries, not by one
			// caller's context.
			plugs, err := a.List(context.Background())
			l.mu.Lock()
			l.err = err
			if err == nil {
				names := map[string]bool{}
				for _, p := range plugs {
					names[p.ID] = true
					if p.Alias != "" {
						names[p.Alias] = true
					}
				}
				l.names = names
			}
			l.listing = nil
			l.mu.Unlock()
			close(wait)
		}()
	}
	l.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return nil, a.fail(OpList, vocab.KindTimeout, fmt.Errorf("waiting for the outlet list: %w", context.Cause(ctx)), nil)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil, l.err
	}
	return l.names, nil
}
