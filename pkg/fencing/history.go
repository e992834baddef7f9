package fencing

import (
	"context"
	"time"

	"fenced.io/fenced/pkg/taint"
)

// The fencer's side of the fence history (pkg/taint/history.go): an entry
// for each taint it applies and each it removes. The history is a record
// for people, read by `fenced history`; no decision reads it. So writing it
// must never hold up or change one: the executor hands the entry to a
// queue and goes on, one writer goroutine writes the queue to the API
// server, and a failure — or a full queue while the API server is away — is
// logged and counted (fenced_history_write_failures_total), nothing more.

// historyQueue bounds the entries waiting to be written. A fencer applies
// taints one node at a time; 256 outlasts an API server outage in all but
// a cluster-wide power loss, where the Events and logs still tell it all.
const historyQueue = 256

// historyWriteTimeout bounds one write, retries on conflict included.
const historyWriteTimeout = 10 * time.Second

// recordHistory queues e for the history writer; it never blocks.
func (f *Fencer) recordHistory(e taint.HistoryEntry) {
	select {
	case f.history <- e:
	default:
		f.cfg.Metrics.HistoryWriteFailures.Inc()
		f.log.Warn("fence history entry dropped: the queue is full (API server unreachable?)", "node", e.Node, "action", string(e.Action))
	}
}

// writeHistory writes queued entries until ctx ends.
func (f *Fencer) writeHistory(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-f.history:
			wctx, cancel := context.WithTimeout(ctx, historyWriteTimeout)
			err := taint.AppendHistory(wctx, f.cfg.Client, f.cfg.LeaseNamespace, e)
			cancel()
			if err != nil {
				f.cfg.Metrics.HistoryWriteFailures.Inc()
				f.log.Warn("fence history entry not written; no decision depends on it", "node", e.Node, "action", string(e.Action), "err", err)
			}
		}
	}
}
