package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/identity/publish"
)

// fencerStateWriter publishes this fencer's state — ready, and what the
// configuration in force says — on its key Lease (publish.PublishFencerState)
// for `fenced status`: every renewEvery, so that a fencer that stopped
// shows as stale, and at once when changed is signalled (a reload).
//
// Display only. Nothing reads it back here, and a write that fails changes
// nothing but what status shows: it is logged once per distinct problem
// and tried again at the next renewal.
type fencerStateWriter struct {
	client   kubernetes.Interface
	ns, node string
	// state is the state now; called from run's goroutine only.
	state      func() publish.FencerState
	renewEvery time.Duration
	now        func() time.Time
	log        *slog.Logger

	// kick asks for a write now; one pending request is enough.
	kick chan struct{}
	// lastErr is the last problem logged ("" when the last write worked).
	lastErr string
}

func newFencerStateWriter(client kubernetes.Interface, ns, node string, state func() publish.FencerState, log *slog.Logger) *fencerStateWriter {
	return &fencerStateWriter{client: client, ns: ns, node: node, state: state,
		renewEvery: publish.FencerStateRenewEvery, now: time.Now, log: log, kick: make(chan struct{}, 1)}
}

// changed asks for the state to be written now. It never blocks: safe to
// call from the configuration reloader.
func (w *fencerStateWriter) changed() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run writes the state now, then at every renewal and change, until ctx
// ends. A stopping fencer writes nothing more: its state goes stale, which
// status shows; a last write on the way out would delay a host's shutdown
// on an API server that may be gone.
func (w *fencerStateWriter) run(ctx context.Context) {
	t := time.NewTicker(w.renewEvery)
	defer t.Stop()
	for {
		w.write(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
	}
}

// write writes the state once, bounded so that an API server that does
// not answer does not hold up the next renewal.
func (w *fencerStateWriter) write(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.renewEvery)
	defer cancel()
	s := w.state()
	err := publish.PublishFencerState(ctx, w.client, w.ns, w.node, s, w.now())
	switch {
	case err == nil:
		if w.lastErr != "" {
			w.log.Info("publishing this fencer's state for fenced status works again", "lease", w.ns+"/"+publish.LeaseName(w.node))
		}
		w.lastErr = ""
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		// Stopping.
	case err.Error() != w.lastErr:
		w.lastErr = err.Error()
		// A warning, not an error: fencing does not depend on it; only
		// `fenced status` shows this fencer as stale.
		w.log.Warn("cannot publish this fencer's state: fenced status will show it as stale; fencing is not affected", "err", err)
	}
}
