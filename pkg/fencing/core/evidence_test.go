package core

import (
	"errors"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// offEvidence is bmc-power-off evidence as the core decides it.
func offEvidence() Evidence {
	return Evidence{Method: vocab.EvidenceBMCPowerOff, At: t0, BootID: "boot-1",
		BMC: &Reading{Power: vocab.PowerOff, At: t0, Endpoint: "ipmi://198.18.0.1:623", SystemGUID: nodeUUID}}
}

// TestEvidenceValidate is docs/design.md §2's rule of what counts, on its own,
// as evidence that a node cannot write: every evidence the Tainter would
// write goes through it, and so does evidence read back from a Node.
func TestEvidenceValidate(t *testing.T) {
	with := func(ev Evidence, mod func(*Evidence)) Evidence {
		mod(&ev)
		return ev
	}
	withPower := func(p vocab.PowerState) Evidence {
		return with(offEvidence(), func(e *Evidence) { e.BMC.Power = p })
	}
	cases := []struct {
		name string
		ev   Evidence
		// why is part of the error, "" for valid evidence.
		why string
	}{
		{"bmc-power-off", offEvidence(), ""},
		{"redfish spelling Off", withPower("Off"), ""},
		{"spaced and upper-case OFF", withPower(" OFF "), ""},
		{"without guid or boot", with(offEvidence(), func(e *Evidence) { e.BMC.SystemGUID, e.BootID = "", "" }), ""},
		{"clean-shutdown", Evidence{Method: vocab.EvidenceCleanShutdown, At: t0, BootID: "boot-1"}, ""},
		{"clean-shutdown, BMC off too", Evidence{Method: vocab.EvidenceCleanShutdown, At: t0, BootID: "boot-1",
			BMC: reading(vocab.PowerOff, t0, "")}, ""},
		{"manual", Evidence{Method: vocab.EvidenceManual, At: t0, By: "alice", Reason: "PDU port 7 switched off"}, ""},
		{"manual, BMC unreachable", Evidence{Method: vocab.EvidenceManual, At: t0,
			BMC: reading(vocab.PowerUnknown, t0, "")}, ""},

		{"empty", Evidence{}, "no method"},
		{"unknown method", Evidence{Method: "timeout", At: t0}, `unknown method "timeout"`},
		{"gossip is no method", Evidence{Method: "gossip-dead", At: t0, BootID: "boot-1"}, "unknown method"},
		{"adopted, unknown", Evidence{Method: unknownMethod, At: t0}, "unknown method"},
		{"method in upper case", with(offEvidence(), func(e *Evidence) { e.Method = "BMC-POWER-OFF" }), "unknown method"},
		{"no time", with(offEvidence(), func(e *Evidence) { e.At = time.Time{} }), "without a time"},
		{"bmc-power-off without a reading", with(offEvidence(), func(e *Evidence) { e.BMC = nil }), "without a BMC reading"},
		{"bmc-power-off reading on", withPower(vocab.PowerOn), "reads power on"},
		{"bmc-power-off reading On", withPower("On"), "reads power on"},
		{"bmc-power-off reading unknown", withPower(vocab.PowerUnknown), `is "unknown", not "off"`},
		{"bmc-power-off reading nothing", withPower(""), `is "", not "off"`},
		{"bmc-power-off reading without time", with(offEvidence(), func(e *Evidence) { e.BMC.At = time.Time{} }), "has no time"},
		{"clean-shutdown without boot", Evidence{Method: vocab.EvidenceCleanShutdown, At: t0}, "without the announcing boot ID"},
		{"clean-shutdown, then on", Evidence{Method: vocab.EvidenceCleanShutdown, At: t0, BootID: "boot-1",
			BMC: reading("ON", t0, "")}, "reads power on"},
		{"manual but BMC reads on", Evidence{Method: vocab.EvidenceManual, At: t0, By: "alice",
			BMC: reading(vocab.PowerOn, t0, "")}, "reads power on"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.ev.Validate()
			switch {
			case tc.why == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.why != "" && (!errors.Is(err, ErrInvalidEvidence) || !strings.Contains(err.Error(), tc.why)):
				t.Fatalf("Validate = %v, want ErrInvalidEvidence saying %q", err, tc.why)
			}
		})
	}
}

func TestEvidenceSummary(t *testing.T) {
	off := offEvidence()
	off.BMC.PoweredOffByFenced, off.By, off.Reason = true, "fencer-a", "NotReady for 40s"
	cases := []struct {
		name string
		ev   Evidence
		want string
	}{
		{"bmc-power-off", off,
			"BMC ipmi://198.18.0.1:623 read power off at 2026-11-21T03:00:00Z after fenced powered it off; by fencer-a: NotReady for 40s"},
		{"bmc-power-off without reading", Evidence{Method: vocab.EvidenceBMCPowerOff}, "BMC read power off"},
		{"clean-shutdown", Evidence{Method: vocab.EvidenceCleanShutdown, By: "fencer-a", BootID: "boot-1"},
			"node announced a clean shutdown of boot boot-1; by fencer-a"},
		{"manual", Evidence{Method: vocab.EvidenceManual, By: "alice", Reason: "PDU off"},
			"confirmed powered off by an operator; by alice: PDU off"},
		{"unknown", Evidence{}, `method ""`},
	}
	for _, tc := range cases {
		if got := tc.ev.Summary(); got != tc.want {
			t.Errorf("%s: Summary = %q, want %q", tc.name, got, tc.want)
		}
	}
}
