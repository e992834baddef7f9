package config

import (
	"cmp"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// fieldErrors collects every problem of a file so that a user fixes them in
// one pass instead of one per restart.
type fieldErrors struct{ problems []Problem }

// add records a problem of field in where, a section (policy) or an item
// of a list, which may name its item: bmc.nodes[0] (node-a). The path is
// written as the file nests it, bmc.nodes[0].address, and the item's name
// kept beside it.
func (f *fieldErrors) add(where, field, format string, args ...any) {
	path, item := where, ""
	if i := strings.Index(where, " ("); i >= 0 {
		if j := strings.Index(where[i:], ")"); j >= 0 {
			path, item = where[:i]+where[i+j+1:], where[i+2:i+j]
		}
	}
	if field != "" {
		path = join(path, field)
	}
	f.problems = append(f.problems, Problem{Path: path, Item: item, Msg: fmt.Sprintf(format, args...)})
}

// resolveInventory applies inheritance and validates the result; the
// settings it leaves unset are the device package's to default. A setting
// is judged where it is written: a mistake in bmc.defaults is reported
// once, there, not again for every node that inherits it.
func resolveInventory(fe *fieldErrors, inv BMCInventory) []ResolvedBMC {
	checkSpec(fe, "bmc.defaults", inv.Defaults)
	checkSettings(fe, "bmc.defaults", inv.Defaults)

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
		checkSpec(fe, where, n.BMCSpec)
		checkSettings(fe, where, n.BMCSpec)
		s := inherit(inv.Defaults, n.BMCSpec)
		checkRequired(fe, where, s)
		out = append(out, resolved(n.Name, s))
	}
	return out
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

// inherit merges node over defaults, field by field: a node's setting
// wins over bmc.defaults'. The password source is inherited as a unit: a
// node that names a file does not also inherit the defaults' environment
// variable.
func inherit(d, n BMCSpec) BMCSpec {
	s := BMCSpec{
		Protocol:     first(n.Protocol, d.Protocol),
		Address:      first(n.Address, d.Address),
		Port:         first(n.Port, d.Port),
		Username:     first(n.Username, d.Username),
		PasswordFile: d.PasswordFile,
		PasswordEnv:  d.PasswordEnv,
		Timeout:      cmp.Or(n.Timeout, d.Timeout),
		Retries:      cmp.Or(n.Retries, d.Retries),
		IPMI:         &IPMISpec{},
		Redfish:      &RedfishSpec{},
	}
	if n.PasswordFile != "" || n.PasswordEnv != "" {
		s.PasswordFile, s.PasswordEnv = n.PasswordFile, n.PasswordEnv
	}
	for _, x := range []BMCSpec{d, n} { // later wins
		if i := x.IPMI; i != nil {
			s.IPMI.CipherSuite = cmp.Or(i.CipherSuite, s.IPMI.CipherSuite)
			s.IPMI.PrivilegeLevel = first(i.PrivilegeLevel, s.IPMI.PrivilegeLevel)
		}
		if r := x.Redfish; r != nil {
			s.Redfish.Scheme = first(r.Scheme, s.Redfish.Scheme)
			s.Redfish.SystemPath = first(r.SystemPath, s.Redfish.SystemPath)
			s.Redfish.Auth = first(r.Auth, s.Redfish.Auth)
			s.Redfish.CAFile = first(r.CAFile, s.Redfish.CAFile)
			s.Redfish.InsecureSkipVerify = cmp.Or(r.InsecureSkipVerify, s.Redfish.InsecureSkipVerify)
		}
	}
	return s
}

// resolved is node's BMC as inherited: what neither the node nor
// bmc.defaults sets stays unset (zero, Retries nil), the device package's
// default (device.WithDefaults).
func resolved(node string, s BMCSpec) ResolvedBMC {
	r := ResolvedBMC{
		Node:               node,
		Protocol:           s.Protocol,
		Address:            s.Address,
		Port:               s.Port,
		Username:           s.Username,
		Password:           PasswordSource{File: s.PasswordFile, Env: s.PasswordEnv},
		Timeout:            duration(s.Timeout, 0),
		IPMIPrivilegeLevel: s.IPMI.PrivilegeLevel,
		RedfishScheme:      s.Redfish.Scheme,
		RedfishSystemPath:  s.Redfish.SystemPath,
		RedfishAuth:        s.Redfish.Auth,
		RedfishCAFile:      s.Redfish.CAFile,
	}
	if s.Retries != nil {
		r.Retries = new(*s.Retries)
	}
	if s.IPMI.CipherSuite != nil {
		r.IPMICipherSuite = *s.IPMI.CipherSuite
	}
	if s.Redfish.InsecureSkipVerify != nil {
		r.RedfishInsecureSkipVerify = *s.Redfish.InsecureSkipVerify
	}
	return r
}

// checkRequired checks that a node's BMC, after inheritance, has what it
// needs: a protocol, an address, a username and a password source.
func checkRequired(fe *fieldErrors, where string, s BMCSpec) {
	if s.Protocol == "" {
		fe.add(where, "protocol", "required (ipmi or redfish), here or in bmc.defaults")
	}
	if s.Address == "" {
		fe.add(where, "address", "required")
	}
	if s.Username == "" {
		fe.add(where, "username", "required, here or in bmc.defaults")
	}
	if s.PasswordFile == "" && s.PasswordEnv == "" {
		fe.add(where, "passwordFile", "required (or passwordEnv), here or in bmc.defaults")
	}
}

// checkSettings validates every setting that s itself sets (bmc.defaults,
// or one node before inheritance).
func checkSettings(fe *fieldErrors, where string, s BMCSpec) {
	switch s.Protocol {
	case "", ProtocolIPMI, ProtocolRedfish:
	default:
		fe.add(where, "protocol", "unknown protocol %q (want ipmi or redfish)", s.Protocol)
	}
	if s.Port < 0 || s.Port > 65535 {
		fe.add(where, "port", "%d is not a port (1-65535)", s.Port)
	}
	if pw := (PasswordSource{File: s.PasswordFile, Env: s.PasswordEnv}); pw.File != "" || pw.Env != "" {
		if _, err := pw.Read(); err != nil {
			field := "passwordFile"
			if pw.File == "" {
				field = "passwordEnv"
			}
			fe.add(where, field, "%v", err)
		}
	}
	if t := duration(s.Timeout, 0); s.Timeout != nil && (t <= 0 || t > maxBMCTimeout) {
		fe.add(where, "timeout", "%s is out of range (more than 0, at most %s)", t, maxBMCTimeout)
	}
	if s.Retries != nil && (*s.Retries < 0 || *s.Retries > maxBMCRetries) {
		fe.add(where, "retries", "%d is out of range (0-%d)", *s.Retries, maxBMCRetries)
	}
	if s.IPMI != nil {
		checkIPMI(fe, where, *s.IPMI)
	}
	if s.Redfish != nil {
		checkRedfish(fe, where, *s.Redfish)
	}
}

// checkIPMI validates the IPMI settings that are set.
func checkIPMI(fe *fieldErrors, where string, s IPMISpec) {
	if c := s.CipherSuite; c != nil && *c == 0 {
		fe.add(where, "ipmi.cipherSuite", "0 authenticates nothing and is refused; use 3 or 17")
	} else if c != nil && (*c < 1 || *c > 17) {
		fe.add(where, "ipmi.cipherSuite", "%d is not an RMCP+ cipher suite (1-17)", *c)
	}
	switch s.PrivilegeLevel {
	case "", "user", "operator", "administrator":
	default:
		fe.add(where, "ipmi.privilegeLevel", "unknown level %q (want user, operator or administrator)", s.PrivilegeLevel)
	}
}

// checkRedfish validates the Redfish settings that are set.
func checkRedfish(fe *fieldErrors, where string, s RedfishSpec) {
	switch s.Scheme {
	case "", "https", "http":
	default:
		fe.add(where, "redfish.scheme", "unknown scheme %q (want https or http)", s.Scheme)
	}
	switch s.Auth {
	case "", "session", "basic":
	default:
		fe.add(where, "redfish.auth", "unknown auth %q (want session or basic)", s.Auth)
	}
	if s.SystemPath != "" && !strings.HasPrefix(s.SystemPath, "/redfish/") {
		fe.add(where, "redfish.systemPath", "%q must start with /redfish/", s.SystemPath)
	}
	if s.CAFile != "" {
		if _, err := os.Stat(s.CAFile); err != nil {
			fe.add(where, "redfish.caFile", "%v", err)
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
