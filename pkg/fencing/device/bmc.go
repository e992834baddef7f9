package device

import (
	"context"
	"errors"
	"fmt"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// BMC is the out-of-band controller of one machine. Every method is bounded
// by the context and by the driver's own per-attempt timeout and retries.
//
// Implementations must never report PowerOff unless the BMC answered an
// authenticated request saying so: a timeout, a refused session or a
// malformed answer is an error, not "off".
type BMC interface {
	// PowerState reads the chassis power state.
	PowerState(ctx context.Context) (vocab.PowerState, error)
	// PowerOff switches the chassis off hard (no graceful shutdown). It only
	// sends the request; use PowerOffVerified to wait until it reads off.
	PowerOff(ctx context.Context) error
	// PowerOn switches the chassis on.
	PowerOn(ctx context.Context) error
	// PowerCycle switches the chassis off and on again.
	PowerCycle(ctx context.Context) error
	// SystemGUID returns the system's GUID/UUID in canonical lower-case form
	// (8-4-4-4-12), for comparison with the Node's status.nodeInfo.systemUUID.
	// It returns an error of kind KindNotSupported when the BMC has none.
	SystemGUID(ctx context.Context) (string, error)
	// Close releases sessions and connections. It is safe to call twice.
	Close() error
}

// Error is the error every driver returns. It names the node, the operation
// and the BMC endpoint, never the credentials.
type Error struct {
	Node string // node name from the inventory
	// Device says what kind of device failed, for the message: "" for a
	// BMC, else e.g. "fence device pdu-a".
	Device   string
	Op       string          // one of the Op* constants
	Endpoint string          // e.g. "ipmi://10.0.0.11:623"
	Kind     vocab.ErrorKind // classification
	Err      error           // underlying cause
}

func (e *Error) Error() string {
	switch {
	case e.Device != "" && e.Node != "":
		return fmt.Sprintf("%s for node %s (%s): %s: %s: %v", e.Device, e.Node, e.Endpoint, e.Op, e.Kind, e.Err)
	case e.Device != "":
		return fmt.Sprintf("%s (%s): %s: %s: %v", e.Device, e.Endpoint, e.Op, e.Kind, e.Err)
	}
	return fmt.Sprintf("bmc of node %s (%s): %s: %s: %v", e.Node, e.Endpoint, e.Op, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the ErrorKind of err, or "" if err is not (or does not wrap)
// an *Error.
func KindOf(err error) vocab.ErrorKind {
	var be *Error
	if errors.As(err, &be) {
		return be.Kind
	}
	return ""
}

// DriverOptions are the settings every driver shares.
type DriverOptions struct {
	// Node is the Kubernetes node name this BMC belongs to (for errors/logs).
	Node string
	// Timeout bounds one attempt of one request.
	Timeout time.Duration
	// Retries is the number of additional attempts after a timeout.
	Retries int
}
