package admin

import (
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/identity/publish"
)

// WatchdogStatus is a node's watchdog level as the API shows it: its
// agent's armed statement, checked as a fencer checks it, and a fence
// order (docs/design.md §10).
type WatchdogStatus struct {
	// Armed is the statement for the boot the node runs, signed with the
	// key its agent published for that boot; nil when there is none, and
	// Refused says why one on its key Lease is not believed.
	Armed   *WatchdogArmed `json:"armed,omitempty"`
	Refused string         `json:"refused,omitempty"`
	// OrderBoot is the boot a fence order names ("" none): if it is the
	// boot the node runs, its watchdog resets it.
	OrderBoot string `json:"orderBoot,omitempty"`
}

// WatchdogArmed is what an armed statement says.
type WatchdogArmed struct {
	Timeout  core.Duration `json:"timeout"`
	Confirm  core.Duration `json:"confirm"`
	Device   string        `json:"device,omitempty"`
	Software bool          `json:"software,omitempty"`
}

// watchdogOf reads n's watchdog level from fenced's Leases by name; nil
// when they hold neither a statement nor an order for it.
func watchdogOf(leases map[string]*coordinationv1.Lease, n NodeStatus) *WatchdogStatus {
	w := &WatchdogStatus{}
	if l, ok := leases[publish.LeaseName(n.Name)]; ok {
		boot, a, err := publish.ArmedOf(l)
		switch {
		case errors.Is(err, publish.ErrNotArmed):
		case err != nil:
			w.Refused = err.Error()
		case boot != n.BootID:
			w.Refused = fmt.Sprintf("stated for boot %s, the node runs boot %s", boot, n.BootID)
		default:
			w.Armed = &WatchdogArmed{Timeout: core.Duration(a.Timeout), Confirm: core.Duration(a.Confirm), Device: a.Device, Software: a.Software}
		}
	}
	if l, ok := leases[publish.OrderLeaseName(n.Name)]; ok {
		if o, ok := publish.OrderOf(l); ok {
			w.OrderBoot = o.BootID
		}
	}
	if *w == (WatchdogStatus{}) {
		return nil
	}
	return w
}

// watchdogCell is the WATCHDOG column.
func watchdogCell(n NodeStatus) string {
	w := n.Watchdog
	if w == nil {
		return "-"
	}
	var parts []string
	switch {
	case w.Armed != nil:
		s := fmt.Sprintf("armed %s/%s", time.Duration(w.Armed.Timeout), time.Duration(w.Armed.Confirm))
		if w.Armed.Software {
			s += " SOFTWARE"
		}
		parts = append(parts, s)
	case w.Refused != "":
		parts = append(parts, "refused")
	}
	switch {
	case w.OrderBoot != "" && w.OrderBoot == n.BootID:
		parts = append(parts, "ordered")
	case w.OrderBoot != "":
		parts = append(parts, "order of an earlier boot")
	}
	return strings.Join(parts, ", ")
}
