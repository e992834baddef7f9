package fencing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// noHistory is a client whose ConfigMap writes the API server refuses, as
// it would a fencer whose RBAC lacks them: the history cannot be written.
type noHistory struct{ kubernetes.Interface }

func (c noHistory) CoreV1() corev1client.CoreV1Interface {
	return noHistoryCore{c.Interface.CoreV1()}
}

type noHistoryCore struct{ corev1client.CoreV1Interface }

func (c noHistoryCore) ConfigMaps(ns string) corev1client.ConfigMapInterface {
	return noHistoryCMs{c.CoreV1Interface.ConfigMaps(ns)}
}

type noHistoryCMs struct {
	corev1client.ConfigMapInterface
}

var errNoHistory = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, taint.HistoryConfigMap, errors.New("test"))

func (noHistoryCMs) Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error) {
	return nil, errNoHistory
}

func (noHistoryCMs) Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error) {
	return nil, errNoHistory
}

// TestHistoryAgainstAPIServer: the fencer records its fence in the history
// ConfigMap, and a history it cannot write changes nothing — the node is
// tainted all the same — but is counted.
func TestHistoryAgainstAPIServer(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{})
	if _, err := c.CreateNamespace(ctx, hostileNS); err != nil {
		t.Fatal(err)
	}

	t.Run("written", func(t *testing.T) {
		b := newSwitchBed(ctx, t, c, "history-victim", testPolicy(vocab.ModeConfirmOnly), nil)
		b.powerLoss()
		b.waitFor(15*time.Second, "taint", b.tainted)
		var got []taint.HistoryEntry
		b.waitFor(15*time.Second, "history entry", func() bool {
			var err error
			got, err = taint.ReadHistory(ctx, b.client, hostileNS, b.node)
			return err == nil && len(got) > 0
		})
		e := got[0]
		if e.Action != taint.HistoryFence || e.By != "fencer" || e.Method != vocab.EvidenceBMCPowerOff || e.Evidence == "" || e.At.IsZero() {
			t.Fatalf("history entry = %+v", e)
		}
		if v := testutil.ToFloat64(b.f.cfg.Metrics.HistoryWriteFailures); v != 0 {
			t.Errorf("fenced_history_write_failures_total = %v", v)
		}
	})

	t.Run("cannot be written", func(t *testing.T) {
		b := newSwitchBed(ctx, t, c, "history-refused", testPolicy(vocab.ModeConfirmOnly), nil,
			func(cfg *Config) { cfg.Client = noHistory{cfg.Client} })
		b.powerLoss()
		b.waitFor(15*time.Second, "taint despite the history", b.tainted)
		b.waitFor(15*time.Second, "a counted history failure", func() bool {
			return testutil.ToFloat64(b.f.cfg.Metrics.HistoryWriteFailures) == 1
		})
	})
}

// TestRecordHistoryNeverBlocks: with nobody writing the queue (the API
// server away), recording goes on at once and counts what it drops.
func TestRecordHistoryNeverBlocks(t *testing.T) {
	f := &Fencer{cfg: Config{Metrics: NewMetrics(prometheus.NewRegistry())}, log: testLog(t, "fencer"), history: make(chan taint.HistoryEntry, 2)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 5 {
			f.recordHistory(taint.HistoryEntry{Node: "n", Action: taint.HistoryFence})
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("recordHistory blocked")
	}
	if v := testutil.ToFloat64(f.cfg.Metrics.HistoryWriteFailures); v != 3 {
		t.Errorf("dropped %v, want 3", v)
	}
}
