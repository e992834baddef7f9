package core

// The words the decision core and the BMC drivers share: what a power
// reading can say, why a request failed, and which request it was. The
// drivers produce them; the core (decide.go) reasons about them; neither
// needs the other to do so.

// PowerState is a chassis power state as read from a BMC.
type PowerState string

const (
	// PowerOn means the BMC reports chassis power on.
	PowerOn PowerState = "on"
	// PowerOff means the BMC reports chassis power off. Only this value,
	// returned together with a nil error, is evidence that a node is off.
	PowerOff PowerState = "off"
	// PowerUnknown is returned together with a non-nil error. It is never
	// evidence of anything.
	PowerUnknown PowerState = "unknown"
)

// ErrorKind classifies why a BMC request failed, so that callers and
// operators can tell a network problem from a credential problem.
type ErrorKind string

const (
	// KindUnreachable: the BMC could not be contacted at all (connection
	// refused, no route, name resolution failed).
	KindUnreachable ErrorKind = "unreachable"
	// KindTimeout: the BMC did not answer within the timeout and retries.
	KindTimeout ErrorKind = "timeout"
	// KindAuth: the BMC refused the credentials or the privilege level.
	KindAuth ErrorKind = "auth"
	// KindBMC: the BMC answered with an error (completion code, HTTP 4xx/5xx,
	// malformed or unexpected answer).
	KindBMC ErrorKind = "bmc-error"
	// KindNotSupported: the BMC does not implement the request.
	KindNotSupported ErrorKind = "not-supported"
)

// Operation names used in errors, logs and metrics.
const (
	OpPowerStatus = "power-status"
	OpPowerOff    = "power-off"
	OpPowerOn     = "power-on"
	OpPowerCycle  = "power-cycle"
	OpSystemGUID  = "system-guid"
)
