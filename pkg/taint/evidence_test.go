package taint

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/vocab"
)

// TestEvidenceAnnotationGolden pins AnnotationEvidence's format: the
// annotations below are what fenced wrote before the evidence model moved
// into pkg/fencing/core (kube.Evidence; the first three are its literal output),
// and nodes tainted then carry them.
// Each must decode to the same meaning and, encoded again, give the same
// bytes — same keys, same omissions of empty fields.
func TestEvidenceAnnotationGolden(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name       string
		annotation string
		want       core.Evidence
	}{
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
			enc, err := encodeEvidence(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if enc != tc.annotation {
				t.Errorf("encoded\n%s\nwant\n%s", enc, tc.annotation)
			}
		})
	}
}
