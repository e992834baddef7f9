package vocab

// The words the decision core (pkg/fencing/core) and the power device
// drivers (pkg/fencing/device) share: what a power reading can say, why a
// request failed, and which request it was. The drivers produce them; the
// core reasons about them; neither needs the other to do so.

// PowerState is a chassis power state as read from a power device.
type PowerState string

const (
	// PowerOn means the device reports chassis power on.
	PowerOn PowerState = "on"
	// PowerOff means the device reports chassis power off. Only this value,
	// returned together with a nil error, is evidence that a node is off.
	PowerOff PowerState = "off"
	// PowerUnknown is returned together with a non-nil error. It is never
	// evidence of anything.
	PowerUnknown PowerState = "unknown"
)

// ErrorKind classifies why a power device request failed, so that callers
// and operators can tell a network problem from a credential problem.
type ErrorKind string

const (
	// KindUnreachable: the device could not be contacted at all
	// (connection refused, no route, name resolution failed).
	KindUnreachable ErrorKind = "unreachable"
	// KindTimeout: the device did not answer within the timeout and
	// retries.
	KindTimeout ErrorKind = "timeout"
	// KindAuth: the device refused the credentials or the privilege level.
	KindAuth ErrorKind = "auth"
	// KindBMC: the device answered with an error (completion code, HTTP
	// 4xx/5xx, malformed or unexpected answer).
	KindBMC ErrorKind = "bmc-error"
	// KindNotSupported: the device does not implement the request.
	KindNotSupported ErrorKind = "not-supported"
	// KindReconfigured: a reload of the configuration changed the node's
	// power devices while the request ran; its answer is not used.
	KindReconfigured ErrorKind = "reconfigured"
	// KindNoSuchPlug: the device's own list of outlets does not name the
	// configured plug, so what it says of that plug says nothing about
	// the node (fence agents read an outlet a PDU lacks as off).
	KindNoSuchPlug ErrorKind = "no-such-plug"
)

// Operation names of power device requests, used in errors, logs and
// metrics.
const (
	OpPowerStatus = "power-status"
	OpPowerOff    = "power-off"
	OpPowerOn     = "power-on"
	OpPowerCycle  = "power-cycle"
	OpSystemGUID  = "system-guid"
)
