package taint

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSetPausedReadsBack: what `fenced pause` and `fenced resume` write is
// what the fencer reads (Paused), reason and all.
func TestSetPausedReadsBack(t *testing.T) {
	for _, tc := range []struct {
		name       string
		data       map[string]string
		paused     bool
		reason     string
		wantReason string
	}{
		{"pause a new ConfigMap", nil, true, " SAN update ", "SAN update"},
		{"pause without reason drops the old one", map[string]string{PauseKey: "true", PauseReasonKey: "old"}, true, "", ""},
		{"resume drops the reason", map[string]string{PauseKey: "TRUE", PauseReasonKey: "old", "other": "kept"}, false, "ignored", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: PauseConfigMap}, Data: tc.data}
			SetPaused(cm, tc.paused, tc.reason)
			if p, r := Paused(cm); p != tc.paused || r != tc.wantReason {
				t.Fatalf("Paused = %v, %q; want %v, %q (data %v)", p, r, tc.paused, tc.wantReason, cm.Data)
			}
			if tc.data["other"] != "" && cm.Data["other"] != "kept" {
				t.Errorf("other keys lost: %v", cm.Data)
			}
		})
	}
}
