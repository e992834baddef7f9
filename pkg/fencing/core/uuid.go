package core

import (
	"encoding/hex"
	"strings"
)

// SameSystemUUID reports whether a BMC's system GUID and a node's
// systemUUID name the same machine. Vendors disagree on the byte order of
// the first three fields (SMBIOS vs RFC 4122), and some BMCs reverse all
// 16 bytes (IPMI's own encoding), so all three readings are accepted; a
// false match between two random UUIDs under these permutations is
// practically impossible. Case, hyphens, braces and a urn:uuid: prefix are
// ignored.
func SameSystemUUID(a, b string) bool {
	ab, ok1 := uuidBytes(a)
	bb, ok2 := uuidBytes(b)
	if !ok1 || !ok2 {
		return false
	}
	if ab == bb {
		return true
	}
	swapped := ab
	swapped[0], swapped[1], swapped[2], swapped[3] = ab[3], ab[2], ab[1], ab[0]
	swapped[4], swapped[5] = ab[5], ab[4]
	swapped[6], swapped[7] = ab[7], ab[6]
	if swapped == bb {
		return true
	}
	var reversed [16]byte
	for i := range ab {
		reversed[i] = ab[15-i]
	}
	return reversed == bb
}

func uuidBytes(s string) ([16]byte, bool) {
	var out [16]byte
	s = strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "urn:uuid:")
	b, err := hex.DecodeString(strings.NewReplacer("-", "", "{", "", "}", "").Replace(s))
	if err != nil || len(b) != len(out) {
		return out, false
	}
	copy(out[:], b)
	return out, true
}
