package agent

import (
	"context"
	"log/slog"
	"time"
)

// The files an agent reads again while it runs — the gossip keys
// (gossipkeys.go) and the configuration (configreload.go) — are polled
// every few seconds rather than watched: a Kubernetes Secret or ConfigMap
// volume changes by swapping its ..data symlink, which a watch on the file
// itself never sees, and a poll costs next to nothing. What both share is
// here: the poll, and the rule that a file that cannot be used is said
// once per distinct problem, not at every poll, and once more when it is
// fixed.

// pollEvery calls check every interval until ctx ends.
func pollEvery(ctx context.Context, interval time.Duration, check func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}

// problemOnce remembers the last problem of polled files that was said.
type problemOnce struct{ last string }

// failed logs err as an error with msg and args when it differs from the
// last problem said, and reports whether it did.
func (p *problemOnce) failed(log *slog.Logger, msg string, err error, args ...any) bool {
	if err.Error() == p.last {
		return false
	}
	p.last = err.Error()
	log.Error(msg, append(args, "err", err)...)
	return true
}

// fixed logs msg once when a problem had been said, and forgets it.
func (p *problemOnce) fixed(log *slog.Logger, msg string, args ...any) {
	if p.last == "" {
		return
	}
	p.last = ""
	log.Info(msg, args...)
}
