package stale

import (
	"testing"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

// TestDefaults keeps the stale report's defaults what they were when
// pkg/config held them, and New applies the grace to a Config that
// leaves it zero (a file without policy.staleAttachmentGrace).
func TestDefaults(t *testing.T) {
	if DefaultGrace != 2*time.Minute || DefaultDelete {
		t.Errorf("DefaultGrace %s, DefaultDelete %v; want 2m0s, false", DefaultGrace, DefaultDelete)
	}
	client := fake.NewClientset()
	r, err := New(Config{Client: client, Informers: NewInformers(informers.NewSharedInformerFactory(client, 0)),
		Recorder: record.NewFakeRecorder(1)})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.Grace != DefaultGrace || r.cfg.Delete != DefaultDelete {
		t.Errorf("New: grace %s, delete %v; want %s, %v", r.cfg.Grace, r.cfg.Delete, DefaultGrace, DefaultDelete)
	}
}
