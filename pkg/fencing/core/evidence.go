package core

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// Evidence is why a node is (to be) fenced: what the core decides a taint
// with (ActApplyTaint), what the Node's evidence annotation stores (the JSON
// tags are that annotation's format: pkg/taint encodes and decodes it, and
// annotations written by earlier versions must keep decoding to the same
// meaning), what `fenced confirm` builds from an operator's word, and what
// `fenced status` shows.
type Evidence struct {
	// Method is the kind of evidence (docs/design.md §2: there is no fifth).
	Method vocab.EvidenceMethod `json:"method"`
	// By is the fencer identity or, for manual evidence, the operator's.
	// The Tainter fills in its identity when it is empty.
	By string `json:"by"`
	// At is when the evidence was taken (the BMC read, the shutdown
	// announcement, the operator's confirmation). Required.
	At time.Time `json:"at"`
	// BootID is the node's boot ID when it was fenced: recovery requires a
	// different one. The Tainter fills in the Node's status.nodeInfo.bootID
	// when it is empty.
	BootID string `json:"bootID,omitempty"`
	// Reason is human text; for manual evidence the operator's --reason.
	Reason string `json:"reason,omitempty"`
	// BMC is the power reading the evidence rests on (required for
	// vocab.EvidenceBMCPowerOff, optional context for the others).
	BMC *Reading `json:"bmc,omitempty"`
	// Watchdog is the wait watchdog evidence rests on (required for
	// vocab.EvidenceWatchdog).
	Watchdog *WatchdogWaited `json:"watchdog,omitempty"`
}

// Reading is one authenticated read of a node's BMC: the latest one the
// fencer has (BMCObs.Reading) and, once it becomes evidence, Evidence.BMC.
type Reading struct {
	// Power is the chassis power state read: vocab.PowerOff for evidence. A
	// stored reading may spell it otherwise (Redfish says "Off"); Validate
	// compares case-insensitively.
	Power vocab.PowerState `json:"power"`
	// At is when the BMC answered; the reading's age counts from it.
	At time.Time `json:"at"`
	// SentAt is when the request was sent.
	SentAt time.Time `json:"sentAt,omitzero"`
	// KubeletLeaseRenewedAt is the renew time of the node's kubelet Lease
	// as the fencer knew it when the BMC answered: a later renewal means
	// the node was alive after the reading (same clock on both sides: the
	// kubelet's).
	KubeletLeaseRenewedAt time.Time `json:"kubeletLeaseRenewedAt,omitzero"`
	// Endpoint is the BMC's address as the inventory names it.
	Endpoint string `json:"endpoint"`
	// SystemGUID is the GUID the BMC reports for the machine, in canonical
	// lower-case form; when both it and the Node's systemUUID are known,
	// they must match (SameSystemUUID).
	SystemGUID string `json:"systemGUID,omitempty"`
	// PoweredOffByFenced says fenced switched the machine off itself
	// (power-off mode) and this reading confirmed it off.
	PoweredOffByFenced bool `json:"poweredOffByFenced,omitempty"`
	// Device and Plug name the power device and plug of one reading of a
	// fencing level (Device "bmc" for the node's BMC, without a plug).
	Device string `json:"device,omitempty"`
	Plug   string `json:"plug,omitempty"`
	// Level is the fencing level this reading comes from (from 1), and
	// Plugs every plug's reading of it (CombineLevels); both are empty for
	// a node whose only power device is its BMC.
	Level int       `json:"level,omitempty"`
	Plugs []Reading `json:"plugs,omitempty"`
}

// GUIDMismatch returns the first part of r whose system GUID names another
// machine than uuid (a Node's systemUUID), or nil. Parts without a GUID
// (PDU outlets) and an unknown uuid prove nothing either way.
func (r *Reading) GUIDMismatch(uuid string) *Reading {
	if r == nil || uuid == "" {
		return nil
	}
	if r.SystemGUID != "" && !SameSystemUUID(r.SystemGUID, uuid) {
		return r
	}
	for i := range r.Plugs {
		if bad := r.Plugs[i].GUIDMismatch(uuid); bad != nil {
			return bad
		}
	}
	return nil
}

// ErrInvalidEvidence is wrapped by the errors of Evidence.Validate, and by
// those of the Tainter when evidence does not justify a taint: unknown
// method, no time, a BMC reading that is not "off", or evidence that
// contradicts the Node (another boot, another machine).
var ErrInvalidEvidence = errors.New("invalid fencing evidence")

// Validate checks that ev is, on its own, evidence that a node cannot write
// to its volumes any more (docs/design.md §2): a known method, a time, for
// bmc-power-off a dated reading of off, for clean-shutdown the announcing
// boot, and never a reading of on. The Tainter calls it before every taint
// and additionally checks the evidence against the Node; callers may call
// it earlier to fail fast. Errors wrap ErrInvalidEvidence.
func (ev Evidence) Validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidEvidence, fmt.Sprintf(format, args...))
	}
	switch {
	case ev.Method == "":
		return invalid("no method")
	case !ev.Method.Valid():
		return invalid("unknown method %q", ev.Method)
	}
	if ev.At.IsZero() {
		return invalid("%s evidence without a time", ev.Method)
	}
	// A reading of "on" is never evidence, whatever else is claimed: for
	// manual evidence §2 says fenced must not have read the power as on, and
	// a node whose clean shutdown was followed by "on" is booting again.
	if ev.BMC != nil && powerIs(ev.BMC.Power, vocab.PowerOn) {
		return invalid("the BMC at %q reads power on", ev.BMC.Endpoint)
	}
	if ev.BMC != nil {
		for _, p := range ev.BMC.Plugs {
			if powerIs(p.Power, vocab.PowerOn) {
				return invalid("%s of %s reads power on", plugName(p.Device, p.Plug), ev.BMC.Endpoint)
			}
		}
	}
	switch ev.Method {
	case vocab.EvidenceBMCPowerOff:
		if ev.BMC == nil {
			return invalid("bmc-power-off evidence without a BMC reading")
		}
		if !powerIs(ev.BMC.Power, vocab.PowerOff) {
			return invalid("bmc-power-off evidence whose BMC reading is %q, not %q", ev.BMC.Power, vocab.PowerOff)
		}
		if ev.BMC.At.IsZero() {
			return invalid("bmc-power-off evidence whose BMC reading has no time")
		}
		// A level is off only when every plug of it reads off, each at a
		// known time.
		for _, p := range ev.BMC.Plugs {
			if !powerIs(p.Power, vocab.PowerOff) {
				return invalid("bmc-power-off evidence of %s whose %s reads %q, not %q", ev.BMC.Endpoint, plugName(p.Device, p.Plug), p.Power, vocab.PowerOff)
			}
			if p.At.IsZero() {
				return invalid("bmc-power-off evidence of %s whose %s reading has no time", ev.BMC.Endpoint, plugName(p.Device, p.Plug))
			}
		}
	case vocab.EvidenceCleanShutdown:
		// The announcement is only meaningful for the boot that made it;
		// without the boot ID a later boot could not be told apart.
		if ev.BootID == "" {
			return invalid("clean-shutdown evidence without the announcing boot ID")
		}
	case vocab.EvidenceWatchdog:
		if why := ev.watchdogInvalid(); why != "" {
			return invalid("%s", why)
		}
	}
	return nil
}

// watchdogInvalid says why watchdog evidence is not evidence, or "": the
// boot its order was for, the statement's W and T, when the order was
// seen, and a wait at least WatchdogWait of them, passed when it was taken.
func (ev Evidence) watchdogInvalid() string {
	w := ev.Watchdog
	if ev.BootID == "" {
		return "watchdog evidence without the boot its order was for"
	}
	if w == nil {
		return "watchdog evidence without its wait"
	}
	tw, need := "", time.Duration(0)
	if w.Timeout > 0 && w.Confirm > 0 {
		tw = fmt.Sprintf("timeout %s and confirm %s", time.Duration(w.Timeout), time.Duration(w.Confirm))
		need = WatchdogWait(WatchdogArm{Timeout: time.Duration(w.Timeout), Confirm: time.Duration(w.Confirm)})
	}
	switch {
	case tw == "":
		return fmt.Sprintf("watchdog evidence with timeout %s and confirm %s: both must be set", time.Duration(w.Timeout), time.Duration(w.Confirm))
	case w.OrderSeenAt.IsZero():
		return "watchdog evidence without the time its fence order was seen"
	case time.Duration(w.Wait) < need:
		return fmt.Sprintf("watchdog evidence that waited %s, less than the %s that %s need", time.Duration(w.Wait), need, tw)
	case ev.At.Before(w.ResetBy()):
		return fmt.Sprintf("watchdog evidence taken at %s, before its wait ended at %s", ev.At.UTC().Format(time.RFC3339Nano), w.ResetBy().UTC().Format(time.RFC3339Nano))
	}
	return ""
}

// powerIs compares a stored power state s with want as a reader of
// evidence must: ignoring case and surrounding space, as the annotation is
// anyone's to write and Redfish spells the states "On" and "Off".
func powerIs(s, want vocab.PowerState) bool {
	return strings.EqualFold(strings.TrimSpace(string(s)), string(want))
}

// Summary is a one-line human description of the evidence, as used in Event
// messages and `fenced status`.
func (ev Evidence) Summary() string {
	var b strings.Builder
	switch ev.Method {
	case vocab.EvidenceBMCPowerOff:
		if ev.BMC != nil && ev.BMC.Level > 0 {
			fmt.Fprintf(&b, "fencing level %d read power %s:", ev.BMC.Level, ev.BMC.Power)
			for i, p := range ev.BMC.Plugs {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, " %s %s at %s", plugName(p.Device, p.Plug), p.Power, p.At.UTC().Format(time.RFC3339))
			}
			if ev.BMC.PoweredOffByFenced {
				b.WriteString(" after fenced powered it off")
			}
		} else if ev.BMC != nil {
			fmt.Fprintf(&b, "BMC %s read power %s at %s", ev.BMC.Endpoint, ev.BMC.Power, ev.BMC.At.UTC().Format(time.RFC3339))
			if ev.BMC.PoweredOffByFenced {
				b.WriteString(" after fenced powered it off")
			}
		} else {
			b.WriteString("BMC read power off")
		}
	case vocab.EvidenceCleanShutdown:
		fmt.Fprintf(&b, "node announced a clean shutdown of boot %s", ev.BootID)
	case vocab.EvidenceManual:
		b.WriteString("confirmed powered off by an operator")
	case vocab.EvidenceWatchdog:
		if w := ev.Watchdog; w != nil {
			kind := "hardware watchdog"
			if w.Software {
				kind = "SOFTWARE watchdog (weaker: a hung kernel does not run it)"
			}
			fmt.Fprintf(&b, "fence order for boot %s seen at %s; the node's %s (timeout %s, confirm %s) has reset it by %s",
				ev.BootID, w.OrderSeenAt.UTC().Format(time.RFC3339), kind, time.Duration(w.Timeout), time.Duration(w.Confirm), w.ResetBy().UTC().Format(time.RFC3339))
		} else {
			b.WriteString("watchdog reset")
		}
	default:
		fmt.Fprintf(&b, "method %q", ev.Method)
	}
	if ev.By != "" {
		fmt.Fprintf(&b, "; by %s", ev.By)
	}
	if ev.Reason != "" {
		fmt.Fprintf(&b, ": %s", ev.Reason)
	}
	return b.String()
}
