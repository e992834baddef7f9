package heartbeat

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"
)

// joinLoop joins the ring through the seeds whenever this agent is alone
// in it: at start, and again after every other member died or left. While
// alone it retries with exponential backoff (retryMin doubling up to
// retryMax, with jitter so that agents that lost each other at the same
// moment do not retry in lockstep). While not alone it sleeps until a
// NotifyLeave reports it alone again: no polling. first is closed when the
// first attempt has ended.
func (r *Ring) joinLoop(ctx context.Context, first chan<- struct{}) {
	firstDone := false
	endFirst := func() {
		if !firstDone {
			firstDone = true
			close(first)
		}
	}
	defer endFirst()

	delay := r.retryMin
	failures := 0
	for {
		if r.alone() {
			joined := r.joinSeeds(failures)
			endFirst()
			if !joined || r.alone() {
				failures++
				if !r.sleep(ctx, jitter(delay)) {
					return
				}
				delay = min(2*delay, r.retryMax)
				continue
			}
		}
		endFirst()
		failures, delay = 0, r.retryMin
		select {
		case <-r.lonely:
			r.log.Info("alone in the gossip ring; looking for seeds again")
		case <-ctx.Done():
			return
		case <-r.done:
			return
		}
	}
}

// alone reports whether this agent is the only alive member it knows.
func (r *Ring) alone() bool { return r.Alive() <= 1 }

// joinSeeds makes one join attempt and reports whether a seed answered.
// The first failure after being alone is logged at warn, the retries
// after it at debug: a lone agent would otherwise fill the log.
func (r *Ring) joinSeeds(failures int) bool {
	seeds := seedAddrs(r.seeds(), r.port, r.LocalAddr())
	logFail := r.log.Debug
	if failures == 0 {
		logFail = r.log.Warn
	}
	if len(seeds) == 0 {
		logFail("no gossip seeds known; retrying in the background")
		return false
	}
	n, err := r.ml.Load().Join(seeds)
	if n == 0 {
		logFail("no gossip seed reachable; retrying in the background", "seeds", seeds, "err", err)
		return false
	}
	r.log.Info("joined gossip ring", "seeds", seeds, "reached", n, "alive", r.Alive())
	return true
}

// sleep waits d and reports false when the loop must end instead.
func (r *Ring) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-r.done:
		return false
	}
}

// jitter spreads d by ±20 %.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}

// seedAddrs turns seeds into host:port (port being the default port),
// dropping blanks, duplicates and this agent's own address: joining
// oneself only costs a connection and proves nothing.
func seedAddrs(seeds []string, port int, self string) []string {
	out := make([]string, 0, len(seeds))
	seen := make(map[string]bool, len(seeds))
	for _, s := range seeds {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(s); err != nil {
			// No port. Bare IPv6 literals have colons, hence the trim and
			// JoinHostPort, which brackets them.
			s = net.JoinHostPort(strings.Trim(s, "[]"), strconv.Itoa(port))
		}
		if s == self || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}
