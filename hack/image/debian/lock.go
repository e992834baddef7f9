// Package debian reads and writes the lock of the fence-agents image's
// Debian packages, resolves that lock from Debian's Packages indexes, and
// fetches, verifies and unpacks the packages it lists — without apt, dpkg
// or any maintainer script, so that the image builds on any machine, for
// any architecture, offline once the packages are cached.
//
// The lock is one text file. Its inputs, written by hand, are lines
//
//	suite BASE DIST          an archive to resolve from, e.g. "debian bookworm"
//	arch ARCH                an architecture to resolve for
//	root PACKAGE             a package the image must hold
//	exclude PACKAGE          a package left out, with its dependents' need of it
//
// and its output, written by the lock program (hack/image/debianlock), one
// line per package and architecture:
//
//	deb ARCH PACKAGE VERSION PATH SHA256 SIZE
//
// where PATH is the package's path below the mirror's root, e.g.
// "debian/pool/main/f/fence-agents/fence-agents_4.12.1-1_amd64.deb".
// Everything after a '#' is a comment.
package debian

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Mirrors are where the lock's paths are fetched from, tried in order
// while one cannot be reached: Debian's CDN over HTTPS, then over HTTP, the
// transport apt itself uses by default (a network that lets only apt's
// traffic out still builds the image). Every file is checked against the
// lock's SHA-256 whatever the transport; HTTPS only keeps the Packages
// indexes the lock program reads from being altered on the way.
var Mirrors = []string{"https://deb.debian.org/", "http://deb.debian.org/"}

// Suite is an archive and distribution the lock is resolved from, e.g.
// {"debian", "bookworm"} or {"debian-security", "bookworm-security"}.
type Suite struct {
	Base, Dist string
}

// Deb is one locked package file.
type Deb struct {
	Arch, Package, Version string
	// Path is below a mirror's root.
	Path   string
	SHA256 string
	Size   int64
}

// Lock is the whole lock file: its inputs and the packages resolved
// from them. Header keeps the input lines and comments as written.
type Lock struct {
	Header   []string
	Suites   []Suite
	Arches   []string
	Roots    []string
	Excludes []string
	Debs     []Deb
}

// ReadLock reads a lock file.
func ReadLock(name string) (*Lock, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	l, err := ParseLock(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return l, nil
}

// ParseLock parses a lock.
func ParseLock(r io.Reader) (*Lock, error) {
	l := &Lock{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		body, _, _ := strings.Cut(line, "#")
		f := strings.Fields(body)
		if len(f) == 0 || f[0] != "deb" {
			l.Header = append(l.Header, line)
		}
		if len(f) == 0 {
			continue
		}
		bad := func() error { return fmt.Errorf("line %d: %q: want %s", n, line, usage[f[0]]) }
		switch f[0] {
		case "suite":
			if len(f) != 3 {
				return nil, bad()
			}
			l.Suites = append(l.Suites, Suite{Base: f[1], Dist: f[2]})
		case "arch", "root", "exclude":
			if len(f) != 2 {
				return nil, bad()
			}
			switch f[0] {
			case "arch":
				l.Arches = append(l.Arches, f[1])
			case "root":
				l.Roots = append(l.Roots, f[1])
			default:
				l.Excludes = append(l.Excludes, f[1])
			}
		case "deb":
			if len(f) != 7 || len(f[5]) != 64 {
				return nil, bad()
			}
			size, err := strconv.ParseInt(f[6], 10, 64)
			if err != nil {
				return nil, bad()
			}
			l.Debs = append(l.Debs, Deb{Arch: f[1], Package: f[2], Version: f[3], Path: f[4], SHA256: f[5], Size: size})
		default:
			return nil, fmt.Errorf("line %d: unknown directive %q (suite, arch, root, exclude, deb)", n, f[0])
		}
	}
	return l, sc.Err()
}

var usage = map[string]string{
	"suite":   "suite BASE DIST",
	"arch":    "arch ARCH",
	"root":    "root PACKAGE",
	"exclude": "exclude PACKAGE",
	"deb":     "deb ARCH PACKAGE VERSION PATH SHA256 SIZE",
}

// Format writes the lock: the header as read, then the debs sorted by
// architecture and package.
func (l *Lock) Format() []byte {
	var b bytes.Buffer
	header := slices.Clone(l.Header)
	for len(header) > 0 && strings.TrimSpace(header[len(header)-1]) == "" {
		header = header[:len(header)-1]
	}
	for _, h := range header {
		b.WriteString(h + "\n")
	}
	debs := slices.Clone(l.Debs)
	slices.SortFunc(debs, func(a, b Deb) int {
		return strings.Compare(a.Arch+" "+a.Package, b.Arch+" "+b.Package)
	})
	b.WriteString("\n")
	for _, d := range debs {
		fmt.Fprintf(&b, "deb %s %s %s %s %s %d\n", d.Arch, d.Package, d.Version, d.Path, d.SHA256, d.Size)
	}
	return b.Bytes()
}

// For is the lock's packages of one architecture.
func (l *Lock) For(arch string) []Deb {
	var out []Deb
	for _, d := range l.Debs {
		if d.Arch == arch {
			out = append(out, d)
		}
	}
	return out
}
