package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"fenced.io/fenced/pkg/core"
	"fenced.io/fenced/pkg/vocab"
)

// PowerOff is the BMCReading.Power value of a chassis that is off. Apply
// compares case-insensitively, so Redfish's "Off" is accepted too.
const PowerOff = "off"

// powerOn is the reading that disqualifies any evidence it is attached to.
const powerOn = "on"

// ErrInvalidEvidence is wrapped by the errors Apply returns when the evidence
// does not justify a taint: unknown method, no time, a BMC reading that is not
// "off", or evidence that contradicts the Node (another boot, another
// machine). The taint is not applied then.
var ErrInvalidEvidence = errors.New("invalid fencing evidence")

// Evidence is why a node was tainted; it is stored as JSON in
// AnnotationEvidence and summarised in the OutOfServiceTaintApplied Event.
type Evidence struct {
	// Method is the kind of evidence (DESIGN.md §2: there is no fourth).
	Method vocab.EvidenceMethod `json:"method"`
	// By is the fencer identity or, for manual evidence, the operator's.
	// Apply fills in the Tainter's identity when it is empty.
	By string `json:"by"`
	// At is when the evidence was taken (the BMC read, the shutdown
	// announcement, the operator's confirmation). Required.
	At time.Time `json:"at"`
	// BootID is the node's boot ID when it was fenced: recovery requires a
	// different one. Apply fills in the Node's status.nodeInfo.bootID when it
	// is empty.
	BootID string `json:"bootID,omitempty"`
	// Reason is human text; for manual evidence the operator's --reason.
	Reason string `json:"reason,omitempty"`
	// BMC is the power reading the evidence rests on (required for
	// vocab.EvidenceBMCPowerOff, optional context for the others).
	BMC *BMCReading `json:"bmc,omitempty"`
}

// BMCReading is one read of a node's BMC.
type BMCReading struct {
	// Power is the chassis power state read: PowerOff for evidence.
	Power string `json:"power"`
	// At is when the BMC answered; the evidence's age counts from it.
	At time.Time `json:"at"`
	// SentAt is when the request was sent.
	SentAt time.Time `json:"sentAt,omitzero"`
	// KubeletLeaseRenewedAt is the renew time of the node's kubelet Lease
	// as the fencer knew it when the BMC answered: a later renewal would
	// have meant the node was alive after the reading.
	KubeletLeaseRenewedAt time.Time `json:"kubeletLeaseRenewedAt,omitzero"`
	// Endpoint is the BMC's address as the inventory names it.
	Endpoint string `json:"endpoint"`
	// SystemGUID is the GUID the BMC reports for the machine, in canonical
	// lower-case form; when both it and the Node's systemUUID are known,
	// Apply requires them to match.
	SystemGUID string `json:"systemGUID,omitempty"`
	// PoweredOffByFenced says fenced switched the machine off itself
	// (power-off mode) before reading "off".
	PoweredOffByFenced bool `json:"poweredOffByFenced,omitempty"`
}

// Validate checks that ev is, on its own, evidence that a node cannot write
// to its volumes any more (DESIGN.md §2). Apply calls it, and additionally
// checks the evidence against the Node; callers may call it earlier to fail
// fast. Errors wrap ErrInvalidEvidence.
func (ev Evidence) Validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidEvidence, fmt.Sprintf(format, args...))
	}
	switch ev.Method {
	case vocab.EvidenceBMCPowerOff, vocab.EvidenceCleanShutdown, vocab.EvidenceManual:
	case "":
		return invalid("no method")
	default:
		return invalid("unknown method %q", ev.Method)
	}
	if ev.At.IsZero() {
		return invalid("%s evidence without a time", ev.Method)
	}
	// A reading of "on" is never evidence, whatever else is claimed: for
	// manual evidence §2 says fenced must not have read the power as on, and
	// a node whose clean shutdown was followed by "on" is booting again.
	if ev.BMC != nil && strings.EqualFold(strings.TrimSpace(ev.BMC.Power), powerOn) {
		return invalid("the BMC at %q reads power on", ev.BMC.Endpoint)
	}
	switch ev.Method {
	case vocab.EvidenceBMCPowerOff:
		if ev.BMC == nil {
			return invalid("bmc-power-off evidence without a BMC reading")
		}
		if !strings.EqualFold(strings.TrimSpace(ev.BMC.Power), PowerOff) {
			return invalid("bmc-power-off evidence whose BMC reading is %q, not %q", ev.BMC.Power, PowerOff)
		}
		if ev.BMC.At.IsZero() {
			return invalid("bmc-power-off evidence whose BMC reading has no time")
		}
	case vocab.EvidenceCleanShutdown:
		// The announcement is only meaningful for the boot that made it;
		// without the boot ID a later boot could not be told apart.
		if ev.BootID == "" {
			return invalid("clean-shutdown evidence without the announcing boot ID")
		}
	}
	return nil
}

// checkAgainst rejects evidence that is about something other than the Node
// as it is now: a different boot (the node came back since) or a different
// machine (the BMC's GUID is not the node's system UUID).
func (ev Evidence) checkAgainst(n *corev1.Node) error {
	if ev.BootID != "" && n.Status.NodeInfo.BootID != "" && ev.BootID != n.Status.NodeInfo.BootID {
		return fmt.Errorf("%w: evidence is for boot %s but node %s now reports boot %s (it restarted since)",
			ErrInvalidEvidence, ev.BootID, n.Name, n.Status.NodeInfo.BootID)
	}
	if ev.BMC != nil && ev.BMC.SystemGUID != "" && n.Status.NodeInfo.SystemUUID != "" &&
		!core.SameSystemUUID(ev.BMC.SystemGUID, n.Status.NodeInfo.SystemUUID) {
		return fmt.Errorf("%w: BMC %q reports system GUID %s but node %s has systemUUID %s (wrong BMC for this node?)",
			ErrInvalidEvidence, ev.BMC.Endpoint, ev.BMC.SystemGUID, n.Name, n.Status.NodeInfo.SystemUUID)
	}
	return nil
}

// Summary is a one-line human description of the evidence, as used in Event
// messages and `fenced status`.
func (ev Evidence) Summary() string {
	var b strings.Builder
	switch ev.Method {
	case vocab.EvidenceBMCPowerOff:
		if ev.BMC != nil {
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

// EvidenceOf parses the node's AnnotationEvidence. ok is false when the node
// has no such annotation; err is set when it has one that does not parse.
func EvidenceOf(n *corev1.Node) (ev Evidence, ok bool, err error) {
	if n == nil {
		return Evidence{}, false, nil
	}
	raw, ok := n.Annotations[AnnotationEvidence]
	if !ok {
		return Evidence{}, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		return Evidence{}, true, fmt.Errorf("node %s: annotation %s: %w", n.Name, AnnotationEvidence, err)
	}
	return ev, true, nil
}
