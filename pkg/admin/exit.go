package admin

import (
	"errors"
	"fmt"
	"net/url"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
)

// The kinds of failure the commands' exit codes tell apart (docs/operations.md,
// "Exit codes"): a finding or a refusal (ErrRefused, ErrStuck, anything
// else), a wrong command line (ErrUnknownNode), and ErrCannotCheck: fenced
// could not get the answer it needed, so it says nothing about the node.
var (
	// ErrUnknownNode is wrapped when a command names a node that does
	// not exist (for the API commands) or is not in the configuration
	// (for the power commands): a wrong argument, like a typo.
	ErrUnknownNode = errors.New("unknown node")
	// ErrCannotCheck is wrapped when a power device could not be asked.
	// An API server that never answered is recognised by CannotCheck
	// without it.
	ErrCannotCheck = errors.New("could not check")
)

// CannotCheck reports whether err means that fenced could not get an
// answer: ErrCannotCheck, or a request to the API server that never got an
// HTTP answer (client-go returns a *url.Error for those: connection
// refused, DNS, TLS, --request-timeout). An answer that is an error (403,
// 404, 409, …) is an answer: a refusal, not this.
func CannotCheck(err error) bool {
	if errors.Is(err, ErrCannotCheck) {
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false
	}
	var ue *url.Error
	return errors.As(err, &ue)
}

// unreached are the device failures where the device never took part:
// nothing answered, nothing in time, or it refused our credentials.
var unreached = []vocab.ErrorKind{vocab.KindUnreachable, vocab.KindTimeout, vocab.KindAuth}

// Failure is r's error for the exit code: nil when OK; wrapping
// ErrCannotCheck when the power could not be read, or a switch never
// reached the BMC; else the BMC's own failure (it refused, or the new
// state was not reached).
func (r BMCResult) Failure() error {
	switch {
	case r.Err == nil:
		return nil
	case r.Action == string(PowerStatus),
		!errors.Is(r.Err, device.ErrNotReached) && slices.Contains(unreached, device.KindOf(r.Err)):
		return fmt.Errorf("%w: %w", ErrCannotCheck, r.Err)
	}
	return r.Err
}

// Failure is r's error for the exit code, as BMCResult.Failure: nil when
// OK; wrapping ErrCannotCheck when no level could be read, or no plug of
// a switch was reached; else the decision.
func (r DeviceResult) Failure() error {
	if r.OK {
		return nil
	}
	err := errors.New(r.Decision)
	if r.Action == vocab.OpPowerStatus {
		return fmt.Errorf("%w: %w", ErrCannotCheck, err)
	}
	for _, p := range r.Plugs {
		if !slices.Contains(unreached, vocab.ErrorKind(p.ErrorKind)) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", ErrCannotCheck, err)
}
