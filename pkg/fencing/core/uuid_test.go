package core

import (
	"strings"
	"testing"
)

func TestSameSystemUUID(t *testing.T) {
	const id = "4c4c4544-0042-3510-8052-b4c04f4d4e31"
	cases := []struct {
		a, b string
		want bool
	}{
		{id, id, true},
		{id, strings.ToUpper(id), true},
		{id, "44454c4c-4200-1035-8052-b4c04f4d4e31", true}, // first three fields byte-swapped
		{id, "314e4d4f-c0b4-5280-1035-42004445 4c4c", false},
		{id, "urn:uuid:{" + id + "}", true},
		{id, "314e4d4f-c0b4-5280-1035-420044454c4c", true}, // all 16 bytes reversed
		{id, "4c4c4544-0042-3510-8052-b4c04f4d4e32", false},
		{id, "", false},
		{"not-a-uuid", "not-a-uuid", false},
	}
	for _, tc := range cases {
		if got := SameSystemUUID(tc.a, tc.b); got != tc.want {
			t.Errorf("SameSystemUUID(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
