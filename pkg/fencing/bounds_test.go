package fencing

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"fenced.io/fenced/pkg/heartbeat"
)

// TestForgeryDedupBounded: the fencer remembers rejected claims by hash,
// so a claim's size costs nothing kept, at most maxForgeriesRemembered
// of them, and warns about forgeryWarningsPerMinute a minute; every
// distinct claim is counted once.
func TestForgeryDedupBounded(t *testing.T) {
	var logged bytes.Buffer
	f := &Fencer{
		cfg:             Config{Metrics: NewMetrics(prometheus.NewRegistry())},
		log:             slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})),
		forged:          map[claimID]struct{}{},
		forgeryWarnings: heartbeat.NewWarnLimiter(forgeryWarningsPerMinute),
	}
	counted := func() float64 { return testutil.ToFloat64(f.cfg.Metrics.Forgeries.WithLabelValues(forgedBadSignature)) }

	steps := []struct {
		name        string
		claims      func(yield func(node, claim string))
		wantCounted float64 // growth of the counter
		maxHeap     int64   // most the live heap may grow while they are remembered
	}{
		{"one claim twice", func(yield func(node, claim string)) {
			yield("victim-1", "sig/shutdown-complete/alive")
			yield("victim-1", "sig/shutdown-complete/alive")
		}, 1, 1 << 20},
		{"fields that concatenate alike are different claims", func(yield func(node, claim string)) {
			yield("victim-1", "x")
			yield("victim-1x", "")
		}, 2, 1 << 20},
		{"64 claims of 1 MB each", func(yield func(node, claim string)) {
			for i := range 64 {
				yield("victim-1", strconv.Itoa(i)+strings.Repeat("s", 1<<20))
			}
		}, 64, 4 << 20},
		{"twice as many claims as remembered", func(yield func(node, claim string)) {
			for i := range 2 * maxForgeriesRemembered {
				yield("victim-1", strconv.Itoa(i))
			}
		}, 2 * maxForgeriesRemembered, 4 << 20},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			before, heap := counted(), liveHeap()
			s.claims(func(node, claim string) { f.forgery(node, forgedBadSignature, claim) })
			if grown := int64(liveHeap()) - int64(heap); grown > s.maxHeap {
				t.Errorf("live heap grew by %d bytes remembering the claims; the bound is %d", grown, s.maxHeap)
			}
			if got := counted() - before; got != s.wantCounted {
				t.Errorf("counted %v forgeries, want %v", got, s.wantCounted)
			}
			if len(f.forged) > maxForgeriesRemembered {
				t.Errorf("%d claims remembered; the bound is %d", len(f.forged), maxForgeriesRemembered)
			}
		})
	}
	if n := strings.Count(logged.String(), "level=WARN"); n != forgeryWarningsPerMinute {
		t.Errorf("%d warnings within a minute; want %d (the rest at debug)", n, forgeryWarningsPerMinute)
	}
	if logged.Len() > 4<<20 {
		t.Errorf("%d bytes logged", logged.Len())
	}
}
