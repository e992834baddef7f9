package taint

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/fencing/core"
)

// FuzzEvidenceOf feeds arbitrary annotation values to EvidenceOf, the
// decoder of AnnotationEvidence on a Node: anyone who may update Nodes can
// write it, and fencers and `fenced status` read it. Seeds
// (testdata/fuzz/FuzzEvidenceOf) are the evidence `make demo` prints (docs/contributing.md) and the
// kinds the tests use. Properties: nothing panics (EvidenceOf, the core's
// Validate and Summary, checkEvidence); evidence that decodes re-encodes
// (encodeEvidence, as Apply writes it), and decode→encode→decode gives the
// same evidence, the same verdict of Validate and the same Summary.
func FuzzEvidenceOf(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Annotations: map[string]string{AnnotationEvidence: string(data)}},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{
				BootID: "ebf366e5-2a02-8178-cb95-96c9785b06d9", SystemUUID: "f7d6e111-b6f7-41bb-abf1-3689ede4b79e",
			}},
		}
		ev, ok, err := EvidenceOf(node)
		if !ok {
			t.Fatal("EvidenceOf reports no annotation on a node that has one")
		}
		if err != nil {
			return
		}
		verdict := ev.Validate()
		summary := ev.Summary()
		_ = checkEvidence(ev, node)

		enc, err := encodeEvidence(ev)
		if err != nil {
			t.Fatalf("decoded evidence does not encode: %v\ninput: %q", err, data)
		}
		node.Annotations[AnnotationEvidence] = enc
		ev2, ok, err := EvidenceOf(node)
		if !ok || err != nil {
			t.Fatalf("re-encoded evidence does not decode: %v\nencoded: %s", err, enc)
		}
		enc2, err := encodeEvidence(ev2)
		if err != nil {
			t.Fatalf("evidence decoded twice does not encode: %v", err)
		}
		if enc != enc2 {
			t.Fatalf("decode→encode→decode changed the evidence:\n%s\n%s", enc, enc2)
		}
		if !sameEvidence(ev, ev2) {
			t.Fatalf("decode→encode→decode changed the evidence: %+v != %+v", ev, ev2)
		}
		if v2 := ev2.Validate(); (verdict == nil) != (v2 == nil) || (verdict != nil && verdict.Error() != v2.Error()) {
			t.Fatalf("Validate changed over a round trip: %v, then %v", verdict, v2)
		}
		if s2 := ev2.Summary(); s2 != summary {
			t.Fatalf("Summary changed over a round trip: %q, then %q", summary, s2)
		}
	})
}

// sameEvidence compares two decoded evidences field by field, times by
// instant and offset (time.Time's == also compares Location pointers).
func sameEvidence(a, b core.Evidence) bool {
	if a.Method != b.Method || a.By != b.By || a.BootID != b.BootID || a.Reason != b.Reason ||
		!sameTime(a.At, b.At) {
		return false
	}
	if (a.BMC == nil) != (b.BMC == nil) || (a.Watchdog == nil) != (b.Watchdog == nil) {
		return false
	}
	if w, v := a.Watchdog, b.Watchdog; w != nil && (w.Timeout != v.Timeout || w.Confirm != v.Confirm || w.Device != v.Device ||
		w.Software != v.Software || !sameTime(w.OrderSeenAt, v.OrderSeenAt) || w.Wait != v.Wait ||
		!sameTime(w.KubeletLeaseRenewedAt, v.KubeletLeaseRenewedAt)) {
		return false
	}
	if a.BMC == nil {
		return true
	}
	return sameReading(*a.BMC, *b.BMC)
}

// sameReading compares two readings as sameEvidence does, a fencing
// level's plugs included.
func sameReading(x, y core.Reading) bool {
	if x.Power != y.Power || x.Endpoint != y.Endpoint || x.SystemGUID != y.SystemGUID ||
		x.PoweredOffByFenced != y.PoweredOffByFenced || !sameTime(x.At, y.At) ||
		!sameTime(x.SentAt, y.SentAt) || !sameTime(x.KubeletLeaseRenewedAt, y.KubeletLeaseRenewedAt) ||
		x.Device != y.Device || x.Plug != y.Plug || x.Level != y.Level || len(x.Plugs) != len(y.Plugs) {
		return false
	}
	for i := range x.Plugs {
		if !sameReading(x.Plugs[i], y.Plugs[i]) {
			return false
		}
	}
	return true
}

// sameTime: the same instant with the same offset.
func sameTime(a, b time.Time) bool {
	return a.Equal(b) && a.Format("Z07:00") == b.Format("Z07:00")
}
