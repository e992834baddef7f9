// Package version says which fenced this is, from the build's own
// information, so that `fenced version`, `fenced --version`, the agents'
// fenced_build_info metric, the User-Agent and the man pages name the same
// build.
//
// The sources, first that answers:
//  1. the linker: make build, image and release pass
//     -ldflags "-X fenced.io/fenced/pkg/version.stamped=$(VERSION)", the
//     output of `git describe --tags --always --dirty`, or a pre-release
//     such as v0.0.0-20261126023409-0f74214c8a1b when no tag exists;
//  2. the main module's version Go records: `go install
//     fenced.io/fenced/cmd/fenced@v0.2.0` records v0.2.0, and `go build` in
//     a git checkout records a pseudo-version (with +dirty when the tree
//     has changes);
//  3. the version-control settings Go records when it knows no module
//     version (vcs.revision, vcs.time, vcs.modified): a pseudo-version of
//     the same shape;
//  4. "(devel)", what Go itself says of a build it knows nothing about.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// stamped is set by the linker (-X); empty in a plain go build.
var stamped string

// Devel is the version of a build that says nothing about itself.
const Devel = "(devel)"

// Version is this binary's version.
func Version() string {
	if stamped != "" {
		return stamped
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Devel
	}
	return FromBuildInfo(bi)
}

// String is the line `fenced version` and `fenced --version` print:
// the version, the Go release that built it, and the platform.
func String() string {
	i := Get()
	return fmt.Sprintf("fenced %s (%s, %s)", i.Version, i.GoVersion, i.Platform)
}

// Info is this binary's version, as `fenced version -o json` prints it.
type Info struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get is this binary's Info: what String says, field by field.
func Get() Info {
	return Info{Version: Version(), GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

// UserAgent is the HTTP User-Agent fenced's Kubernetes clients send.
func UserAgent() string {
	return "fenced/" + strings.TrimPrefix(Version(), "v")
}

// FromBuildInfo is the version the build information bi records: the main
// module's version when Go knows one, else a pseudo-version made of the
// version-control settings, else Devel.
func FromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != Devel {
		return v
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	revision := settings["vcs.revision"]
	if revision == "" {
		return Devel
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	// Go's pseudo-versions stamp the commit's time in UTC, to the second.
	stamp := "00000000000000"
	if t, err := time.Parse(time.RFC3339, settings["vcs.time"]); err == nil {
		stamp = t.UTC().Format("20060102150405")
	}
	v := "v0.0.0-" + stamp + "-" + revision
	if settings["vcs.modified"] == "true" {
		v += "+dirty"
	}
	return v
}
