package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// fieldErrors collects every problem of a file so that a user fixes them in
// one pass instead of one per restart.
type fieldErrors struct{ errs []error }

func (f *fieldErrors) add(where, field, format string, args ...any) {
	f.errs = append(f.errs, fmt.Errorf("%s: %s: %s", where, field, fmt.Sprintf(format, args...)))
}

func (f *fieldErrors) err() error { return errors.Join(f.errs...) }

// resolveInventory applies inheritance and defaults and validates the result.
func resolveInventory(inv BMCInventory) ([]ResolvedBMC, error) {
	var fe fieldErrors
	checkSpec(&fe, "bmc.defaults", inv.Defaults)

	seen := map[string]int{}
	out := make([]ResolvedBMC, 0, len(inv.Nodes))
	for i, n := range inv.Nodes {
		where := fmt.Sprintf("bmc.nodes[%d]", i)
		if n.Name == "" {
			fe.add(where, "name", "required")
		} else {
			where = fmt.Sprintf("bmc.nodes[%d] (%s)", i, n.Name)
			if msgs := validation.IsDNS1123Subdomain(n.Name); len(msgs) > 0 {
				fe.add(where, "name", "not a valid node name: %s", strings.Join(msgs, "; "))
			}
			if first, dup := seen[n.Name]; dup {
				fe.add(where, "name", "duplicate node: already defined at bmc.nodes[%d]", first)
			}
			seen[n.Name] = i
		}
		checkSpec(&fe, where, n.BMCSpec)
		r := inherit(n.Name, inv.Defaults, n.BMCSpec)
		checkResolved(&fe, where, r)
		out = append(out, r)
	}
	if err := fe.err(); err != nil {
		return nil, err
	}
	return out, nil
}

// checkSpec reports problems visible in one spec on its own, before
// inheritance: an inline password, or two password sources at once.
func checkSpec(fe *fieldErrors, where string, s BMCSpec) {
	if s.Password != "" {
		fe.add(where, "password", "inline passwords are not accepted (they end up in backups and logs); use passwordFile or passwordEnv")
	}
	if s.PasswordFile != "" && s.PasswordEnv != "" {
		fe.add(where, "passwordFile/passwordEnv", "set only one of them")
	}
}

// inherit merges node over defaults over built-in defaults. The password
// source is inherited as a unit: a node that names a file does not also
// inherit the defaults' environment variable.
func inherit(node string, d, n BMCSpec) ResolvedBMC {
	r := ResolvedBMC{
		Node:               node,
		Protocol:           first(n.Protocol, d.Protocol),
		Address:            first(n.Address, d.Address),
		Port:               first(n.Port, d.Port),
		Username:           first(n.Username, d.Username),
		Password:           PasswordSource{File: d.PasswordFile, Env: d.PasswordEnv},
		Timeout:            DefaultBMCTimeout,
		Retries:            DefaultBMCRetries,
		IPMICipherSuite:    DefaultIPMICipherSuite,
		IPMIPrivilegeLevel: DefaultIPMIPrivilegeLevel,
		RedfishScheme:      DefaultRedfishScheme,
		RedfishAuth:        DefaultRedfishAuth,
	}
	if n.PasswordFile != "" || n.PasswordEnv != "" {
		r.Password = PasswordSource{File: n.PasswordFile, Env: n.PasswordEnv}
	}
	for _, s := range []BMCSpec{d, n} { // later wins
		if s.Timeout != nil {
			r.Timeout = s.Timeout.Duration
		}
		if s.Retries != nil {
			r.Retries = *s.Retries
		}
		if s.IPMI != nil {
			if s.IPMI.CipherSuite != nil {
				r.IPMICipherSuite = *s.IPMI.CipherSuite
			}
			r.IPMIPrivilegeLevel = first(s.IPMI.PrivilegeLevel, r.IPMIPrivilegeLevel)
		}
		if s.Redfish != nil {
			r.RedfishScheme = first(s.Redfish.Scheme, r.RedfishScheme)
			r.RedfishSystemPath = first(s.Redfish.SystemPath, r.RedfishSystemPath)
			r.RedfishAuth = first(s.Redfish.Auth, r.RedfishAuth)
			r.RedfishCAFile = first(s.Redfish.CAFile, r.RedfishCAFile)
			if s.Redfish.InsecureSkipVerify != nil {
				r.RedfishInsecureSkipVerify = *s.Redfish.InsecureSkipVerify
			}
		}
	}
	if r.Port == 0 {
		switch {
		case r.Protocol == ProtocolIPMI:
			r.Port = DefaultIPMIPort
		case r.Protocol == ProtocolRedfish && r.RedfishScheme == "http":
			r.Port = DefaultRedfishHTTPPort
		case r.Protocol == ProtocolRedfish:
			r.Port = DefaultRedfishHTTPSPort
		}
	}
	return r
}

// checkResolved validates a node's BMC after inheritance.
func checkResolved(fe *fieldErrors, where string, r ResolvedBMC) {
	switch r.Protocol {
	case ProtocolIPMI, ProtocolRedfish:
	case "":
		fe.add(where, "protocol", "required (ipmi or redfish), here or in bmc.defaults")
	default:
		fe.add(where, "protocol", "unknown protocol %q (want ipmi or redfish)", r.Protocol)
	}
	if r.Address == "" {
		fe.add(where, "address", "required")
	}
	if r.Port < 1 || r.Port > 65535 {
		fe.add(where, "port", "%d is not a port (1-65535)", r.Port)
	}
	if r.Username == "" {
		fe.add(where, "username", "required, here or in bmc.defaults")
	}
	if r.Password.File == "" && r.Password.Env == "" {
		fe.add(where, "passwordFile", "required (or passwordEnv), here or in bmc.defaults")
	} else if _, err := r.Password.Read(); err != nil {
		field := "passwordFile"
		if r.Password.File == "" {
			field = "passwordEnv"
		}
		fe.add(where, field, "%v", err)
	}
	if r.Timeout <= 0 || r.Timeout > maxBMCTimeout {
		fe.add(where, "timeout", "%s is out of range (more than 0, at most %s)", r.Timeout, maxBMCTimeout)
	}
	if r.Retries < 0 || r.Retries > maxBMCRetries {
		fe.add(where, "retries", "%d is out of range (0-%d)", r.Retries, maxBMCRetries)
	}
	switch r.Protocol {
	case ProtocolIPMI:
		if r.IPMICipherSuite == 0 {
			fe.add(where, "ipmi.cipherSuite", "0 authenticates nothing and is refused; use 3 or 17")
		} else if r.IPMICipherSuite < 1 || r.IPMICipherSuite > 17 {
			fe.add(where, "ipmi.cipherSuite", "%d is not an RMCP+ cipher suite (1-17)", r.IPMICipherSuite)
		}
		switch r.IPMIPrivilegeLevel {
		case "user", "operator", "administrator":
		default:
			fe.add(where, "ipmi.privilegeLevel", "unknown level %q (want user, operator or administrator)", r.IPMIPrivilegeLevel)
		}
	case ProtocolRedfish:
		switch r.RedfishScheme {
		case "https", "http":
		default:
			fe.add(where, "redfish.scheme", "unknown scheme %q (want https or http)", r.RedfishScheme)
		}
		switch r.RedfishAuth {
		case "session", "basic":
		default:
			fe.add(where, "redfish.auth", "unknown auth %q (want session or basic)", r.RedfishAuth)
		}
		if r.RedfishSystemPath != "" && !strings.HasPrefix(r.RedfishSystemPath, "/redfish/") {
			fe.add(where, "redfish.systemPath", "%q must start with /redfish/", r.RedfishSystemPath)
		}
		if r.RedfishCAFile != "" {
			if _, err := os.Stat(r.RedfishCAFile); err != nil {
				fe.add(where, "redfish.caFile", "%v", err)
			}
		}
	}
}

func first[T comparable](vals ...T) T {
	var zero T
	for _, v := range vals {
		if v != zero {
			return v
		}
	}
	return zero
}
