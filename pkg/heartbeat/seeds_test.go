package heartbeat

import (
	"slices"
	"testing"
)

func TestSeedAddrs(t *testing.T) {
	cases := []struct {
		name  string
		seeds []string
		want  []string
	}{
		{"default port", []string{"10.0.0.1", "node-b.example"}, []string{"10.0.0.1:7946", "node-b.example:7946"}},
		{"explicit port kept", []string{"10.0.0.1:9000"}, []string{"10.0.0.1:9000"}},
		{"ipv6", []string{"fd00::1", "[fd00::2]", "[fd00::3]:9000"}, []string{"[fd00::1]:7946", "[fd00::2]:7946", "[fd00::3]:9000"}},
		{"blanks and duplicates", []string{"", " 10.0.0.1 ", "10.0.0.1:7946"}, []string{"10.0.0.1:7946"}},
		{"self dropped", []string{"10.0.0.9", "10.0.0.1"}, []string{"10.0.0.1:7946"}},
		{"none", nil, []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := seedAddrs(tc.seeds, 7946, "10.0.0.9:7946")
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
