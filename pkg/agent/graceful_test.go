package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"fenced.io/fenced/pkg/shutdown"
	"fenced.io/fenced/pkg/vocab"
)

// TestGracefulWatch: the state is checked again and again; a change is
// published (a failed write is retried until it goes through) and the
// gauge follows; an unchanged state is not written again.
func TestGracefulWatch(t *testing.T) {
	states := []vocab.GracefulShutdown{vocab.GracefulUnknown, vocab.GracefulNone, vocab.GracefulNone,
		vocab.GracefulKubeletDelayLock, vocab.GracefulKubeletDelayLock}
	var (
		mu        sync.Mutex
		probes    int
		written   []vocab.GracefulShutdown
		failFirst = 2 // the first two writes fail: the Lease is not there yet
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	w := &gracefulWatch{
		probe: func() shutdown.GracefulCheck {
			mu.Lock()
			defer mu.Unlock()
			s := states[min(probes, len(states)-1)]
			probes++
			if probes == len(states)+3 {
				close(done)
			}
			c := shutdown.GracefulCheck{State: s}
			if s == vocab.GracefulKubeletDelayLock {
				c.Lock = &shutdown.Inhibitor{Who: "kubelet", Why: "w", What: "shutdown", Mode: "delay"}
			}
			return c
		},
		publish: func(_ context.Context, s vocab.GracefulShutdown) error {
			mu.Lock()
			defer mu.Unlock()
			if failFirst > 0 {
				failFirst--
				return errors.New("leases \"fenced-agent-node-a\" not found")
			}
			written = append(written, s)
			return nil
		},
		gauge: gauge, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		interval: time.Millisecond, retry: time.Millisecond,
	}
	stopped := make(chan struct{})
	go func() {
		w.run(ctx)
		close(stopped)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the watch stopped checking")
	}
	cancel()
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	// unknown fails, none fails then is written, lock written, no repeats.
	if want := []vocab.GracefulShutdown{vocab.GracefulNone, vocab.GracefulKubeletDelayLock}; !slices.Equal(written, want) {
		t.Errorf("written %v, want %v", written, want)
	}
	if v := testutil.ToFloat64(gauge); v != 1 {
		t.Errorf("gauge %v, want 1", v)
	}
}
