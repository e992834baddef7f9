package taint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

// TestEvidenceAnnotationHistory holds every shape of AnnotationEvidence
// fenced ever wrote — all of them format 1, written without "v" — as the
// exact bytes of that time: nodes tainted then carry them, and a fencer
// meets them on upgrade. The shapes, oldest first:
//
//   - 907329a (the first fencer): method, by, at, bootID, reason, and a BMC
//     reading of power, at, endpoint, systemGUID, poweredOffByFenced;
//   - bb47378: the reading gains sentAt and kubeletLeaseRenewedAt;
//   - 75ff57d: a fencing level's reading gains level and plugs, each plug
//     a reading with device and plug (a BMC-only node's reading unchanged);
//   - since 0f74214 a level's reading carries its kubeletLeaseRenewedAt.
//
// The annotations marked with a commit are that commit's own output
// (json.Marshal of its evidence type, run at that commit; CombineLevels
// for the level readings); the others are kube.Evidence's literal output
// (between 82a967a and 37c6145) and hand-written edge cases. Each must
// decode to the same meaning and, encoded again, give the same bytes with
// only the version in front: same keys, same order, same omissions. And
// those bytes, format 1 as written now, read in every earlier fenced as
// the annotation did.
func TestEvidenceAnnotationHistory(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const (
		bootA = "ebf366e5-2a02-8178-cb95-96c9785b06d9"
		guidA = "f7d6e111-b6f7-41bb-abf1-3689ede4b79e"
		bootB = "b0b1c2d3-0000-4000-8000-000000000001"
		guidB = "0e6b2c1a-9d57-4f6e-8a55-3b1f0c9d2e41"
		bootC = "3c1f2a9e-6a43-4d8e-9b1e-2f7c5d0a4b11"
	)
	levelPlug := func(device, answered string, renewed bool) core.Reading {
		r := core.Reading{Power: vocab.PowerOff, At: at(answered), SentAt: at("2026-11-23T09:14:40.31Z"), Endpoint: device, Device: device, Plug: "3"}
		if renewed {
			r.KubeletLeaseRenewedAt = at("2026-11-23T09:14:02.118Z")
		}
		return r
	}
	cases := []struct {
		name       string
		annotation string
		want       core.Evidence
	}{
		{"907329a: bmc-power-off",
			`{"method":"bmc-power-off","by":"cp-1","at":"2026-11-21T14:05:12.518731012Z","bootID":"ebf366e5-2a02-8178-cb95-96c9785b06d9","reason":"BMC ipmi://198.18.0.1:623 read power off after the node stopped answering (gossip dead)","bmc":{"power":"off","at":"2026-11-21T14:05:12.51410045Z","endpoint":"ipmi://198.18.0.1:623","systemGUID":"f7d6e111-b6f7-41bb-abf1-3689ede4b79e"}}`,
			core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "cp-1", At: at("2026-11-21T14:05:12.518731012Z"), BootID: bootA,
				Reason: "BMC ipmi://198.18.0.1:623 read power off after the node stopped answering (gossip dead)",
				BMC:    &core.Reading{Power: vocab.PowerOff, At: at("2026-11-21T14:05:12.51410045Z"), Endpoint: "ipmi://198.18.0.1:623", SystemGUID: guidA}}},
		{"907329a: bmc-power-off in power-off mode",
			`{"method":"bmc-power-off","by":"cp-1","at":"2026-11-21T14:05:40.1Z","bootID":"b0b1c2d3-0000-4000-8000-000000000001","reason":"fenced switched the node off and read power off","bmc":{"power":"off","at":"2026-11-21T14:05:40.09Z","endpoint":"ipmi://198.18.0.1:624","systemGUID":"0e6b2c1a-9d57-4f6e-8a55-3b1f0c9d2e41","poweredOffByFenced":true}}`,
			core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "cp-1", At: at("2026-11-21T14:05:40.1Z"), BootID: bootB,
				Reason: "fenced switched the node off and read power off",
				BMC:    &core.Reading{Power: vocab.PowerOff, At: at("2026-11-21T14:05:40.09Z"), Endpoint: "ipmi://198.18.0.1:624", SystemGUID: guidB, PoweredOffByFenced: true}}},
		{"907329a: clean-shutdown",
			`{"method":"clean-shutdown","by":"cp-1","at":"2026-11-21T14:06:00Z","bootID":"ebf366e5-2a02-8178-cb95-96c9785b06d9","reason":"node announced shutdown-complete and left the ring"}`,
			core.Evidence{Method: vocab.EvidenceCleanShutdown, By: "cp-1", At: at("2026-11-21T14:06:00Z"), BootID: bootA,
				Reason: "node announced shutdown-complete and left the ring"}},
		{"907329a: manual, BMC unreachable",
			`{"method":"manual","by":"fenced-confirm/alice","at":"2026-11-21T14:07:00Z","reason":"PDU port 7 switched off","bmc":{"power":"unknown","at":"2026-11-21T14:07:00Z","endpoint":"ipmi://198.18.0.1:625"}}`,
			core.Evidence{Method: vocab.EvidenceManual, By: "fenced-confirm/alice", At: at("2026-11-21T14:07:00Z"), Reason: "PDU port 7 switched off",
				BMC: &core.Reading{Power: vocab.PowerUnknown, At: at("2026-11-21T14:07:00Z"), Endpoint: "ipmi://198.18.0.1:625"}}},
		{"bb47378: bmc-power-off, the reading dated on both ends",
			`{"method":"bmc-power-off","by":"cp-1","at":"2026-11-21T14:05:12.518731012Z","bootID":"ebf366e5-2a02-8178-cb95-96c9785b06d9","reason":"BMC ipmi://198.18.0.1:623 read power off after the node stopped answering (gossip dead)","bmc":{"power":"off","at":"2026-11-21T14:05:12.51410045Z","sentAt":"2026-11-21T14:05:12.503362811Z","kubeletLeaseRenewedAt":"2026-11-21T14:04:31.225318Z","endpoint":"ipmi://198.18.0.1:623","systemGUID":"f7d6e111-b6f7-41bb-abf1-3689ede4b79e"}}`,
			core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "cp-1", At: at("2026-11-21T14:05:12.518731012Z"), BootID: bootA,
				Reason: "BMC ipmi://198.18.0.1:623 read power off after the node stopped answering (gossip dead)",
				BMC: &core.Reading{Power: vocab.PowerOff, At: at("2026-11-21T14:05:12.51410045Z"), SentAt: at("2026-11-21T14:05:12.503362811Z"),
					KubeletLeaseRenewedAt: at("2026-11-21T14:04:31.225318Z"), Endpoint: "ipmi://198.18.0.1:623", SystemGUID: guidA}}},
		{"75ff57d: a fencing level of two PDU outlets",
			`{"method":"bmc-power-off","by":"cp-1","at":"2026-11-23T09:14:40.46Z","bootID":"3c1f2a9e-6a43-4d8e-9b1e-2f7c5d0a4b11","reason":"level 2 read power off after the node stopped answering (gossip dead)","bmc":{"power":"off","at":"2026-11-23T09:14:40.402917Z","sentAt":"2026-11-23T09:14:40.31Z","endpoint":"level 2 (pdu-a:3, pdu-b:3)","level":2,"plugs":[{"power":"off","at":"2026-11-23T09:14:40.402917Z","sentAt":"2026-11-23T09:14:40.31Z","kubeletLeaseRenewedAt":"2026-11-23T09:14:02.118Z","endpoint":"pdu-a","device":"pdu-a","plug":"3"},{"power":"off","at":"2026-11-23T09:14:40.455103Z","sentAt":"2026-11-23T09:14:40.31Z","kubeletLeaseRenewedAt":"2026-11-23T09:14:02.118Z","endpoint":"pdu-b","device":"pdu-b","plug":"3"}]}}`,
			core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "cp-1", At: at("2026-11-23T09:14:40.46Z"), BootID: bootC,
				Reason: "level 2 read power off after the node stopped answering (gossip dead)",
				BMC: &core.Reading{Power: vocab.PowerOff, At: at("2026-11-23T09:14:40.402917Z"), SentAt: at("2026-11-23T09:14:40.31Z"),
					Endpoint: "level 2 (pdu-a:3, pdu-b:3)", Level: 2,
					Plugs: []core.Reading{levelPlug("pdu-a", "2026-11-23T09:14:40.402917Z", true), levelPlug("pdu-b", "2026-11-23T09:14:40.455103Z", true)}}}},
		{"0f74214: a fencing level of two PDU outlets",
			`{"method":"bmc-power-off","by":"cp-1","at":"2026-11-23T09:14:40.46Z","bootID":"3c1f2a9e-6a43-4d8e-9b1e-2f7c5d0a4b11","reason":"level 2 read power off after the node stopped answering (gossip dead)","bmc":{"power":"off","at":"2026-11-23T09:14:40.402917Z","sentAt":"2026-11-23T09:14:40.31Z","kubeletLeaseRenewedAt":"2026-11-23T09:14:02.118Z","endpoint":"level 2 (pdu-a:3, pdu-b:3)","level":2,"plugs":[{"power":"off","at":"2026-11-23T09:14:40.402917Z","sentAt":"2026-11-23T09:14:40.31Z","kubeletLeaseRenewedAt":"2026-11-23T09:14:02.118Z","endpoint":"pdu-a","device":"pdu-a","plug":"3"},{"power":"off","at":"2026-11-23T09:14:40.455103Z","sentAt":"2026-11-23T09:14:40.31Z","kubeletLeaseRenewedAt":"2026-11-23T09:14:02.118Z","endpoint":"pdu-b","device":"pdu-b","plug":"3"}]}}`,
			core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "cp-1", At: at("2026-11-23T09:14:40.46Z"), BootID: bootC,
				Reason: "level 2 read power off after the node stopped answering (gossip dead)",
				BMC: &core.Reading{Power: vocab.PowerOff, At: at("2026-11-23T09:14:40.402917Z"), SentAt: at("2026-11-23T09:14:40.31Z"),
					KubeletLeaseRenewedAt: at("2026-11-23T09:14:02.118Z"), Endpoint: "level 2 (pdu-a:3, pdu-b:3)", Level: 2,
					Plugs: []core.Reading{levelPlug("pdu-a", "2026-11-23T09:14:40.402917Z", true), levelPlug("pdu-b", "2026-11-23T09:14:40.455103Z", true)}}}},
		{"bmc-power-off, every field",
			`{"method":"bmc-power-off","by":"fencer-a","at":"2026-03-01T03:00:00.123456789+01:00","bootID":"ebf366e5-2a02-8178-cb95-96c9785b06d9","reason":"NotReady for 40s, gossip dead","bmc":{"power":"off","at":"2026-03-01T02:00:00Z","sentAt":"2026-03-01T01:59:59.5Z","kubeletLeaseRenewedAt":"2026-03-01T01:59:30Z","endpoint":"ipmi://198.18.0.11:623","systemGUID":"f7d6e111-b6f7-41bb-abf1-3689ede4b79e","poweredOffByFenced":true}}`,
			core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "fencer-a", At: at("2026-03-01T03:00:00.123456789+01:00"),
				BootID: "ebf366e5-2a02-8178-cb95-96c9785b06d9", Reason: "NotReady for 40s, gossip dead",
				BMC: &core.Reading{Power: vocab.PowerOff, At: at("2026-03-01T02:00:00Z"), SentAt: at("2026-03-01T01:59:59.5Z"),
					KubeletLeaseRenewedAt: at("2026-03-01T01:59:30Z"), Endpoint: "ipmi://198.18.0.11:623",
					SystemGUID: "f7d6e111-b6f7-41bb-abf1-3689ede4b79e", PoweredOffByFenced: true}}},
		{"manual, BMC unreachable",
			`{"method":"manual","by":"fenced-confirm/alice","at":"2026-03-01T03:00:00Z","reason":"PDU port 7 switched off","bmc":{"power":"unknown","at":"2026-03-01T03:00:00Z","endpoint":"bmc"}}`,
			core.Evidence{Method: vocab.EvidenceManual, By: "fenced-confirm/alice", At: at("2026-03-01T03:00:00Z"),
				Reason: "PDU port 7 switched off", BMC: &core.Reading{Power: vocab.PowerUnknown, At: at("2026-03-01T03:00:00Z"), Endpoint: "bmc"}}},
		{"watchdog",
			`{"method":"watchdog","by":"cp-1","at":"2026-11-27T09:00:56.1Z","bootID":"b7","reason":"fence order seen","watchdog":{"timeout":"10s","confirm":"30s","device":"i6300ESB timer","orderSeenAt":"2026-11-27T09:00:13.2Z","wait":"42.808080809s","kubeletLeaseRenewedAt":"2026-11-27T09:00:01Z"}}`,
			core.Evidence{Method: vocab.EvidenceWatchdog, By: "cp-1", At: at("2026-11-27T09:00:56.1Z"), BootID: "b7", Reason: "fence order seen",
				Watchdog: &core.WatchdogWaited{Timeout: core.Duration(10 * time.Second), Confirm: core.Duration(30 * time.Second), Device: "i6300ESB timer",
					OrderSeenAt: at("2026-11-27T09:00:13.2Z"), Wait: core.Duration(42808080809), KubeletLeaseRenewedAt: at("2026-11-27T09:00:01Z")}}},
		{"clean-shutdown",
			`{"method":"clean-shutdown","by":"fencer-a","at":"2026-03-01T03:00:00Z","bootID":"b1"}`,
			core.Evidence{Method: vocab.EvidenceCleanShutdown, By: "fencer-a", At: at("2026-03-01T03:00:00Z"), BootID: "b1"}},
		{"redfish spelling",
			`{"method":"bmc-power-off","by":"fencer-a","at":"2026-03-01T03:00:00Z","bmc":{"power":"Off","at":"2026-03-01T03:00:00Z","endpoint":"redfish://bmc"}}`,
			core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "fencer-a", At: at("2026-03-01T03:00:00Z"),
				BMC: &core.Reading{Power: "Off", At: at("2026-03-01T03:00:00Z"), Endpoint: "redfish://bmc"}}},
		{"empty", `{"method":"","by":"","at":"0001-01-01T00:00:00Z"}`, core.Evidence{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationEvidence: tc.annotation}}}
			got, ok, err := EvidenceOf(n)
			if !ok || err != nil {
				t.Fatalf("EvidenceOf = %v, %v", ok, err)
			}
			if !sameEvidence(got, tc.want) {
				t.Errorf("decoded %+v (bmc %+v), want %+v (bmc %+v)", got, got.BMC, tc.want, tc.want.BMC)
			}
			want := `{"v":1,` + tc.annotation[1:]
			// Every earlier fenced read the annotation with json.Unmarshal
			// into its evidence type (these JSON tags), ignoring fields it
			// did not know: it reads format 1 with its version as without.
			var earlier core.Evidence
			if err := json.Unmarshal([]byte(want), &earlier); err != nil || !sameEvidence(earlier, tc.want) {
				t.Errorf("an earlier fenced reads %s as %+v (%v)", want, earlier, err)
			}
			for _, ev := range []core.Evidence{tc.want, got} {
				enc, err := encodeEvidence(ev)
				if err != nil {
					t.Fatal(err)
				}
				if enc != want {
					t.Errorf("encoded\n%s\nwant\n%s", enc, want)
				}
			}
		})
	}
}

// TestEvidenceAnnotationFormat pins what Apply writes: format 1, its
// version first.
func TestEvidenceAnnotationFormat(t *testing.T) {
	at := time.Date(2026, 11, 30, 8, 0, 0, 250000000, time.UTC)
	enc, err := encodeEvidence(core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "cp-1", At: at, BootID: "b1", Reason: "r",
		BMC: &core.Reading{Power: vocab.PowerOff, At: at, Endpoint: "ipmi://198.18.0.1:623"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"method":"bmc-power-off","by":"cp-1","at":"2026-11-30T08:00:00.25Z","bootID":"b1","reason":"r","bmc":{"power":"off","at":"2026-11-30T08:00:00.25Z","endpoint":"ipmi://198.18.0.1:623"}}`
	if enc != want {
		t.Errorf("encoded\n%s\nwant\n%s", enc, want)
	}
	if EvidenceFormat != 1 {
		t.Errorf("EvidenceFormat is %d: a new format needs its own case here and in TestEvidenceAnnotationHistory, and docs/design.md's rule", EvidenceFormat)
	}
}

// TestEvidenceOfFormatVersions: every format up to EvidenceFormat is read;
// a newer one is refused with an FormatError naming it — also when
// the rest of it would not parse as format 1, or would parse and mean
// something else — and a "v" that is no version is a plain error.
func TestEvidenceOfFormatVersions(t *testing.T) {
	const body = `"method":"clean-shutdown","by":"cp-1","at":"2026-11-30T08:00:00Z","bootID":"b1"`
	cases := []struct {
		name       string
		annotation string
		newer      int  // the FormatError's format, 0: none
		bad        bool // another error
	}{
		{"no version: format 1", `{` + body + `}`, 0, false},
		{"format 1", `{"v":1,` + body + `}`, 0, false},
		{"format 1, version last", `{` + body + `,"v":1}`, 0, false},
		{"format 1 with a field this fenced does not know", `{"v":1,` + body + `,"witness":"cp-2"}`, 0, false},
		{"format 2 that format 1 would misread", `{"v":2,` + body + `,"quorum":{"required":2}}`, 2, false},
		{"format 2 that format 1 cannot parse", `{"v":2,"method":{"kind":"clean-shutdown"},"at":1764489600}`, 2, false},
		{"format 2, nothing else", `{"v":2}`, 2, false},
		{"format 1000", `{"v":1000,` + body + `}`, 1000, false},
		{"version 0", `{"v":0,` + body + `}`, 0, true},
		{"negative version", `{"v":-1,` + body + `}`, 0, true},
		{"fractional version", `{"v":1.5,` + body + `}`, 0, true},
		{"version as a string", `{"v":"2",` + body + `}`, 0, true},
		{"null version", `{"v":null,` + body + `}`, 0, true},
		{"not an object", `[1]`, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationEvidence: tc.annotation}}}
			ev, ok, err := EvidenceOf(n)
			if !ok {
				t.Fatal("EvidenceOf reports no annotation")
			}
			var fe *FormatError
			switch {
			case tc.newer > 0:
				if !errors.As(err, &fe) || fe.Format != tc.newer || fe.Node != "n1" || NewerFormat(err) != tc.newer {
					t.Fatalf("EvidenceOf = %+v, %v; want an FormatError for format %d", ev, err, tc.newer)
				}
				if ev.Method != "" || !ev.At.IsZero() {
					t.Errorf("a newer format was read anyway: %+v", ev)
				}
				for _, s := range []string{"newer fenced", fmt.Sprintf("format %d", tc.newer), "upgrade"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
			case tc.bad:
				if err == nil || NewerFormat(err) != 0 {
					t.Fatalf("EvidenceOf = %+v, %v; want an error that is no FormatError", ev, err)
				}
			default:
				if err != nil || ev.Method != vocab.EvidenceCleanShutdown || ev.BootID != "b1" {
					t.Fatalf("EvidenceOf = %+v, %v", ev, err)
				}
			}
		})
	}
}

// TestNewerEvidenceIsNeverWritten: a Node a newer fenced fenced (its
// evidence in a format this one does not read) is not written by this
// fenced's Tainter at all: Remove refuses, taint there or not (leftover
// annotations), and Apply finds the taint there.
func TestNewerEvidenceIsNeverWritten(t *testing.T) {
	const newer = `{"v":2,"method":"bmc-power-off","by":"cp-new","at":"2026-11-30T08:00:00Z","bootID":"` + testBoot + `"}`
	fencedNode := func(tainted bool) *corev1.Node {
		n := testNode("n1")
		n.Annotations[AnnotationAppliedBy] = "cp-new"
		n.Annotations[AnnotationEvidence] = newer
		if tainted {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintKey, Value: TaintValue, Effect: corev1.TaintEffectNoExecute})
		}
		return n
	}
	cases := []struct {
		name    string
		tainted bool
		op      func(*Tainter) error
		wantErr bool
	}{
		{"Remove", true, func(tn *Tainter) error { _, err := tn.Remove(context.Background(), "n1", "recovered"); return err }, true},
		{"Remove of leftover annotations", false, func(tn *Tainter) error { _, err := tn.Remove(context.Background(), "n1", "recovered"); return err }, true},
		{"Apply", true, func(tn *Tainter) error {
			applied, err := tn.Apply(context.Background(), "n1", bmcEvidence())
			if applied {
				return errors.New("applied")
			}
			return err
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := fencedNode(tc.tainted)
			tn, cs, rec := newTainter("cp-old", before.DeepCopy())
			err := tc.op(tn)
			if tc.wantErr && NewerFormat(err) != 2 {
				t.Errorf("error %v; want the FormatError of format 2", err)
			}
			if !tc.wantErr && err != nil {
				t.Errorf("error %v", err)
			}
			for _, a := range cs.Actions() {
				if a.GetVerb() != "get" {
					t.Errorf("wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
			if evs := events(rec); len(evs) != 0 {
				t.Errorf("events %q", evs)
			}
			after := getNode(t, cs, "n1")
			if after.Annotations[AnnotationEvidence] != newer || after.Annotations[AnnotationAppliedBy] != "cp-new" || HasTaint(after) != tc.tainted {
				t.Errorf("node changed: taints %v, annotations %v", after.Spec.Taints, after.Annotations)
			}
		})
	}
}
