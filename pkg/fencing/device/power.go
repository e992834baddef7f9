package device

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// VerifyOptions control how a power action is confirmed, the way
// fence_ipmilan does it: send the request, wait PowerWait, then read the
// status every Interval until it matches or Timeout has passed.
type VerifyOptions struct {
	// PowerWait is the pause after sending the request, before the first
	// status read (0: DefaultPowerWait).
	PowerWait time.Duration
	// Interval between status reads (0: DefaultPollInterval).
	Interval time.Duration
	// Timeout for the state to be reached, counted from sending (0:
	// DefaultPowerTimeout).
	Timeout time.Duration
	// Progress, when set, is told after each status read that did not yet
	// show the requested state: commands a person waits on print it (see
	// ProgressPrinter). nil: silent.
	Progress func(VerifyProgress)
}

// VerifyProgress is one status read during the wait of a verified action.
type VerifyProgress struct {
	// Want is the state waited for; Last what the device read (unknown
	// when the read failed, with Err).
	Want, Last vocab.PowerState
	Err        error
	// Elapsed since the request was sent; Timeout the bound.
	Elapsed, Timeout time.Duration
}

// ProgressPrinter returns a VerifyOptions.Progress that writes one line to
// w at most every `every` (default 5s) — "worker-3: still reads on after
// 6s, waiting up to 20s for off" — so a command that waits says what for.
func ProgressPrinter(w io.Writer, label string, every time.Duration) func(VerifyProgress) {
	if every <= 0 {
		every = 5 * time.Second
	}
	var mu sync.Mutex
	next := every
	return func(p VerifyProgress) {
		mu.Lock()
		defer mu.Unlock()
		if p.Elapsed < next {
			return
		}
		next = p.Elapsed + every
		reads := "still reads " + string(p.Last)
		if p.Err != nil {
			reads = "status read failed (" + p.Err.Error() + ")"
		}
		fmt.Fprintf(w, "%s: %s after %s, waiting up to %s for %s\n", label, reads,
			p.Elapsed.Round(time.Second), p.Timeout, p.Want)
	}
}

func (o VerifyOptions) withDefaults() VerifyOptions {
	if o.PowerWait <= 0 {
		o.PowerWait = DefaultPowerWait
	}
	if o.Interval <= 0 {
		o.Interval = DefaultPollInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultPowerTimeout
	}
	return o
}

// ActionResult says what a verified power action did.
type ActionResult struct {
	// State is the last state read; on success the requested one.
	State vocab.PowerState
	// AlreadyInState is true when no request was sent because the chassis
	// was already in the requested state.
	AlreadyInState bool
	// Elapsed is the time from the first request to the confirming read.
	Elapsed time.Duration
}

// PowerOffVerified switches the chassis off and returns once an
// authenticated status read says off. Any other outcome is an error and
// must not be taken as evidence.
func PowerOffVerified(ctx context.Context, b BMC, o VerifyOptions) (ActionResult, error) {
	return switchVerified(ctx, b, o, vocab.PowerOff, b.PowerOff)
}

// PowerOnVerified switches the chassis on and returns once it reads on.
func PowerOnVerified(ctx context.Context, b BMC, o VerifyOptions) (ActionResult, error) {
	return switchVerified(ctx, b, o, vocab.PowerOn, b.PowerOn)
}

// PowerCycleVerified switches the chassis off, waits until it reads off,
// then switches it on and waits until it reads on — what fence agents do
// for "reboot". A single BMC "power cycle" request cannot be verified by
// reading the state: the off phase may be over before the first read.
func PowerCycleVerified(ctx context.Context, b BMC, o VerifyOptions) (ActionResult, error) {
	start := time.Now()
	if res, err := PowerOffVerified(ctx, b, o); err != nil {
		return res, err
	}
	res, err := PowerOnVerified(ctx, b, o)
	res.Elapsed = time.Since(start)
	res.AlreadyInState = false
	return res, err
}

func switchVerified(ctx context.Context, b BMC, o VerifyOptions, want vocab.PowerState,
	send func(context.Context) error) (ActionResult, error) {
	o = o.withDefaults()
	state, err := b.PowerState(ctx)
	if err != nil {
		return ActionResult{State: vocab.PowerUnknown}, err
	}
	if state == want {
		return ActionResult{State: state, AlreadyInState: true}, nil
	}
	start := time.Now()
	if err := send(ctx); err != nil {
		return ActionResult{State: state}, err
	}
	res, err := waitFor(ctx, b, o, want)
	res.Elapsed = time.Since(start)
	return res, err
}

// ErrNotReached is wrapped by the error returned when the BMC accepted a
// request but never reported the requested state within the timeout.
var ErrNotReached = errors.New("power state not reached")

func waitFor(ctx context.Context, b BMC, o VerifyOptions, want vocab.PowerState) (ActionResult, error) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	timer := time.NewTimer(o.PowerWait)
	defer timer.Stop()
	last := vocab.PowerUnknown
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return ActionResult{State: vocab.PowerUnknown}, fmt.Errorf("%w: wanted %s within %s, last read failed: %w",
					ErrNotReached, want, o.Timeout, lastErr)
			}
			return ActionResult{State: last}, fmt.Errorf("%w: wanted %s within %s, BMC still reads %s",
				ErrNotReached, want, o.Timeout, last)
		case <-timer.C:
		}
		state, err := b.PowerState(ctx)
		if err == nil && state == want {
			return ActionResult{State: state}, nil
		}
		// A failed read during the wait is not final: the BMC may be busy
		// switching. Keep the last error for the report.
		last, lastErr = state, err
		if o.Progress != nil {
			o.Progress(VerifyProgress{Want: want, Last: state, Err: err, Elapsed: time.Since(began), Timeout: o.Timeout})
		}
		timer.Reset(o.Interval)
	}
}
