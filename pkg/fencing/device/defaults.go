package device

import (
	"cmp"
	"net"
	"strconv"
	"time"

	"fenced.io/fenced/pkg/config"
)

// The defaults of a power device's settings, each with its reason. This
// package applies them where a setting is unset (zero): pkg/config cannot
// name them (this package imports it), so its loader leaves a setting the
// file does not set at zero and validates only what the file sets
// (config.ResolvedBMC, config.FenceDevice, config.Fencer.PowerTimeout).
const (
	// DefaultIPMIPort is the standard RMCP port.
	DefaultIPMIPort = 623
	// DefaultRedfishHTTPSPort and DefaultRedfishHTTPPort are the standard
	// web ports.
	DefaultRedfishHTTPSPort = 443
	DefaultRedfishHTTPPort  = 80

	// DefaultBMCTimeout bounds one attempt of one BMC request. BMCs answer
	// in milliseconds when healthy; a few seconds covers a busy one.
	DefaultBMCTimeout = 5 * time.Second
	// DefaultBMCRetries is the number of further attempts after a timeout
	// (IPMI runs over UDP, where single datagrams get lost).
	DefaultBMCRetries = 2

	// DefaultIPMICipherSuite is RMCP+ suite 3 (HMAC-SHA1, HMAC-SHA1-96,
	// AES-CBC-128), the suite ipmitool uses and every BMC implements.
	DefaultIPMICipherSuite = 3
	// DefaultIPMIPrivilegeLevel can switch power (needed for power-off mode
	// and `fenced bmc off`).
	DefaultIPMIPrivilegeLevel = "administrator"

	// DefaultRedfishScheme is https: a BMC's credentials never cross the
	// network in clear text unless the configuration says http.
	DefaultRedfishScheme = "https"
	// DefaultRedfishAuth uses a Redfish session (one login per operation).
	DefaultRedfishAuth = RedfishAuthSession

	// DefaultFenceAgentTimeout bounds one run of a fence agent: its login
	// (login_timeout 5 s), the request and, for off/on, its own wait for
	// the new state (power_wait, then polls up to power_timeout 20 s) —
	// fence agents' defaults, with a margin.
	DefaultFenceAgentTimeout = 60 * time.Second

	// DefaultPowerTimeout bounds the wait for a switched device to read
	// the new state (VerifyOptions.Timeout): fence_ipmilan's power_timeout.
	DefaultPowerTimeout = 20 * time.Second
	// DefaultPowerWait and DefaultPollInterval are fence_ipmilan's
	// power_wait (BMCs often still report the old state right after the
	// request) and its one status read a second.
	DefaultPowerWait    = time.Second
	DefaultPollInterval = time.Second
)

// WithDefaults returns r with every setting the configuration left unset
// at this package's default. NewDriver applies it; so must anything else
// that reads a ResolvedBMC's settings (Endpoint does).
func WithDefaults(r config.ResolvedBMC) config.ResolvedBMC {
	if r.Timeout == 0 {
		r.Timeout = DefaultBMCTimeout
	}
	if r.Retries == nil {
		r.Retries = new(DefaultBMCRetries)
	}
	r.IPMICipherSuite = cmp.Or(r.IPMICipherSuite, DefaultIPMICipherSuite)
	r.IPMIPrivilegeLevel = cmp.Or(r.IPMIPrivilegeLevel, DefaultIPMIPrivilegeLevel)
	r.RedfishScheme = cmp.Or(r.RedfishScheme, DefaultRedfishScheme)
	r.RedfishAuth = cmp.Or(r.RedfishAuth, DefaultRedfishAuth)
	if r.Port == 0 {
		switch {
		case r.Protocol == config.ProtocolIPMI:
			r.Port = DefaultIPMIPort
		case r.Protocol == config.ProtocolRedfish && r.RedfishScheme == "http":
			r.Port = DefaultRedfishHTTPPort
		case r.Protocol == config.ProtocolRedfish:
			r.Port = DefaultRedfishHTTPSPort
		}
	}
	return r
}

// Endpoint is r's BMC address as a URL-like string for messages, e.g.
// "ipmi://10.0.0.11:623", its port and scheme defaulted as the driver's
// are. It never contains credentials.
func Endpoint(r config.ResolvedBMC) string {
	r = WithDefaults(r)
	scheme := r.Protocol
	if r.Protocol == config.ProtocolRedfish {
		scheme = r.RedfishScheme
	}
	return scheme + "://" + net.JoinHostPort(r.Address, strconv.Itoa(r.Port))
}
