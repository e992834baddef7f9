package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0f74214c8a1b2c3d4e5f60718293a4b5c6d7e8f9"},
			{Key: "vcs.time", Value: "2026-11-26T03:34:09+01:00"},
			{Key: "vcs.modified", Value: modified},
		}
	}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"go install of a tagged version", debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}}, "v0.2.0"},
		{"module version wins over vcs settings", debug.BuildInfo{Main: debug.Module{Version: "v0.2.1-0.20261126023409-0f74214c8a1b+dirty"}, Settings: vcs("true")}, "v0.2.1-0.20261126023409-0f74214c8a1b+dirty"},
		{"vcs settings, clean", debug.BuildInfo{Main: debug.Module{Version: Devel}, Settings: vcs("false")}, "v0.0.0-20261126023409-0f74214c8a1b"},
		{"vcs settings, modified", debug.BuildInfo{Main: debug.Module{Version: Devel}, Settings: vcs("true")}, "v0.0.0-20261126023409-0f74214c8a1b+dirty"},
		{"a revision without a time", debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}}, "v0.0.0-00000000000000-abc"},
		{"nothing known", debug.BuildInfo{Main: debug.Module{Version: Devel}}, Devel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromBuildInfo(&tc.bi); got != tc.want {
				t.Errorf("FromBuildInfo = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStampedWins(t *testing.T) {
	old := stamped
	t.Cleanup(func() { stamped = old })
	stamped = "v9.9.9"
	if got := Version(); got != "v9.9.9" {
		t.Errorf("Version() = %q with the linker's stamp v9.9.9", got)
	}
	if got := UserAgent(); got != "fenced/9.9.9" {
		t.Errorf("UserAgent() = %q", got)
	}
}
