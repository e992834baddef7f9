package config

import "time"

// Every default of the configuration file is here, and only here. The
// README's configuration reference is written from this file.
const (
	// DefaultPath is where fenced looks for its configuration when neither
	// --config nor FENCED_CONFIG is given.
	DefaultPath = "/etc/fenced/config.yaml"

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

	// DefaultRedfishScheme is https.
	DefaultRedfishScheme = "https"
	// DefaultRedfishAuth uses a Redfish session (one login per operation).
	DefaultRedfishAuth = "session"
)

// Limits enforced by validation.
const (
	maxBMCTimeout = 5 * time.Minute
	maxBMCRetries = 10
)
