package core

import (
	"fmt"
	"strings"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// Fencing topology (Pacemaker's): a node has ordered levels of power
// devices — its BMC first, say, then the two PDU outlets that feed its two
// power supplies. The rule of what the levels say, together, lives here.

// PlugRead is what reading one plug of a level gave: exactly one of
// Reading and Failure is set.
type PlugRead struct {
	// Device and Plug name what was read (Device "bmc" is the node's BMC,
	// which has no plug).
	Device, Plug string
	Reading      *Reading
	Failure      *Failure
}

// LevelRead is what reading every plug of one level gave.
type LevelRead struct {
	// Level is the level's number, from 1.
	Level int
	Plugs []PlugRead
}

// readable reports whether every plug of l gave an authenticated reading
// of on or off, and if not, why.
func (l LevelRead) readable() (bool, string) {
	if len(l.Plugs) == 0 {
		return false, "no plugs"
	}
	for _, p := range l.Plugs {
		switch {
		case p.Failure != nil:
			return false, fmt.Sprintf("%s: %s: %s", plugName(p.Device, p.Plug), p.Failure.Kind, p.Failure.Message)
		case p.Reading == nil:
			return false, plugName(p.Device, p.Plug) + ": not read"
		case p.Reading.Power != vocab.PowerOn && p.Reading.Power != vocab.PowerOff:
			return false, fmt.Sprintf("%s: read %q, neither on nor off", plugName(p.Device, p.Plug), p.Reading.Power)
		}
	}
	return true, ""
}

// Decides reports whether level l settles the node's power state, so that
// the levels after it need not be read: every plug answered on or off.
func (l LevelRead) Decides() bool {
	ok, _ := l.readable()
	return ok
}

// CombineLevels is the rule of fencing topology: the levels are taken in
// order, and the first one whose every plug answered decides — off only
// when every plug of it reads off (a machine with two power supplies on
// two PDUs is off only when both outlets are), on when any plug reads on.
// A level that cannot be read completely is skipped, never taken as off.
//
// A level that is the node's BMC alone gives the BMC's reading unchanged.
// Otherwise it returns the deciding level as one Reading — power, the oldest answer
// time of its plugs (the evidence is as old as its oldest part), the
// earliest kubelet Lease renew time its plugs knew, Level, and every
// plug's reading in Plugs — or, when no level decides, a Failure naming
// each level and why it gave nothing.
func CombineLevels(levels []LevelRead) (*Reading, *Failure) {
	if len(levels) == 1 && len(levels[0].Plugs) == 1 && levels[0].Plugs[0].Device == vocab.DeviceBMC && levels[0].Plugs[0].Failure != nil {
		// The node's BMC alone, failing: its failure as it always was.
		f := *levels[0].Plugs[0].Failure
		return nil, &f
	}
	var why []string
	var kind vocab.ErrorKind
	var failedAt time.Time
	for _, l := range levels {
		ok, reason := l.readable()
		if !ok {
			why = append(why, fmt.Sprintf("level %d: %s", l.Level, reason))
			for _, p := range l.Plugs {
				if p.Failure != nil {
					if kind == "" {
						kind = p.Failure.Kind
					}
					if p.Failure.At.After(failedAt) {
						failedAt = p.Failure.At
					}
				}
			}
			continue
		}
		if len(l.Plugs) == 1 && l.Plugs[0].Device == vocab.DeviceBMC {
			// The node's BMC alone: its reading as it always was, so
			// that a cluster without fencing topology sees no change.
			r := *l.Plugs[0].Reading
			return &r, nil
		}
		return combineLevel(l), nil
	}
	if kind == "" {
		kind = vocab.KindBMC
	}
	if len(why) == 0 {
		why = []string{"no levels"}
	}
	return nil, &Failure{Op: vocab.OpPowerStatus, Kind: kind, Message: "no level could be read: " + strings.Join(why, "; "), At: failedAt}
}

// combineLevel is a level every plug of which answered, as one Reading
// (CombineLevels).
func combineLevel(l LevelRead) *Reading {
	r := &Reading{Power: vocab.PowerOff, Level: l.Level}
	renewKnown := false
	names := make([]string, 0, len(l.Plugs))
	for _, p := range l.Plugs {
		pr := *p.Reading
		pr.Device, pr.Plug = p.Device, p.Plug
		if pr.Power == vocab.PowerOn {
			r.Power = vocab.PowerOn
		}
		if r.At.IsZero() || pr.At.Before(r.At) {
			r.At = pr.At
		}
		if !pr.SentAt.IsZero() && (r.SentAt.IsZero() || pr.SentAt.Before(r.SentAt)) {
			r.SentAt = pr.SentAt
		}
		// The kubelet heartbeat known at the oldest answer: a renewal
		// after any part of the level contradicts all of it.
		if !renewKnown || pr.KubeletLeaseRenewedAt.Before(r.KubeletLeaseRenewedAt) {
			r.KubeletLeaseRenewedAt, renewKnown = pr.KubeletLeaseRenewedAt, true
		}
		r.Plugs = append(r.Plugs, pr)
		names = append(names, plugName(p.Device, p.Plug))
	}
	r.Endpoint = fmt.Sprintf("level %d (%s)", l.Level, strings.Join(names, ", "))
	return r
}

// plugName is "device:plug", or the device alone when it has no plug.
func plugName(device, plug string) string {
	if plug == "" {
		return device
	}
	return device + ":" + plug
}
