package debian

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// File is one entry of the unpacked packages' tree.
type File struct {
	// Name is relative, a directory's without a trailing slash.
	Name string
	// Type is tar.TypeDir, tar.TypeReg or tar.TypeSymlink.
	Type     byte
	Mode     int64 // permission bits and the sticky bit; never setuid or setgid
	Linkname string
	Body     []byte
	// Package is the package the entry came from ("" for the tree's own
	// directories and the merged-/usr links).
	Package string
}

// mergedUsr are the top-level directories that are links into /usr on a
// Debian system since bookworm's installer (merged /usr): a package's
// /lib/x86_64-linux-gnu/libc.so.6 is /usr/lib/x86_64-linux-gnu/libc.so.6,
// and the ELF interpreter the binaries name (/lib64/ld-linux-x86-64.so.2,
// /lib/ld-linux-aarch64.so.1) resolves through the link.
var mergedUsr = []string{"bin", "lib", "lib32", "lib64", "libx32", "sbin"}

// Dropped are documentation trees an image has no use for; each package's
// copyright file stays (usr/share/doc/PACKAGE/copyright): the licences
// travel with the binaries.
var dropped = []string{"usr/share/doc", "usr/share/info", "usr/share/lintian", "usr/share/locale", "usr/share/man", "usr/share/bug"}

// Unpack unpacks the packages' data, as dpkg --unpack would and without
// running any maintainer script, into one tree: paths under /usr merged,
// documentation but the copyright files left out, hard links made copies,
// setuid and setgid bits cleared; every entry owned by root. Two packages
// may both hold a directory; a file they both hold must be the same. The
// files come back sorted by name, every parent directory before its
// contents.
func Unpack(debs map[string][]byte) ([]File, error) {
	tree := map[string]File{}
	for _, pkg := range slicesSortedKeys(debs) {
		if err := unpackOne(pkg, debs[pkg], tree); err != nil {
			return nil, fmt.Errorf("%s: %w", pkg, err)
		}
	}
	for _, top := range mergedUsr {
		if _, ok := tree["usr/"+top]; ok || top == "bin" || top == "sbin" || top == "lib" {
			tree[top] = File{Name: top, Type: tar.TypeSymlink, Mode: 0o777, Linkname: "usr/" + top}
			ensureDir(tree, "usr/"+top)
		}
	}
	names := slicesSortedKeys(tree)
	for _, n := range names {
		for dir := path.Dir(n); dir != "."; dir = path.Dir(dir) {
			ensureDir(tree, dir)
		}
	}
	out := make([]File, 0, len(tree))
	for _, n := range slicesSortedKeys(tree) {
		out = append(out, tree[n])
	}
	// Parents first: "usr/lib-x" sorts before "usr/lib/" by bytes but
	// after "usr/lib" as a path; sort by path components.
	slices.SortFunc(out, func(a, b File) int { return comparePaths(a.Name, b.Name) })
	return out, nil
}

func comparePaths(a, b string) int {
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/"))
}

func ensureDir(tree map[string]File, dir string) {
	if _, ok := tree[dir]; !ok {
		tree[dir] = File{Name: dir, Type: tar.TypeDir, Mode: 0o755}
	}
}

func slicesSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// cleanName is a package entry's name in the tree: relative, merged /usr;
// "" for the root.
func cleanName(name string) string {
	name = strings.Trim(path.Clean("/"+name), "/")
	if name == "" {
		return ""
	}
	top, _, _ := strings.Cut(name, "/")
	if slices.Contains(mergedUsr, top) {
		name = "usr/" + name
	}
	return name
}

func isDropped(name, pkg string) bool {
	for _, d := range dropped {
		if name == d || strings.HasPrefix(name, d+"/") {
			rest := strings.TrimPrefix(name, "usr/share/doc/")
			if d == "usr/share/doc" && (name == d || !strings.Contains(rest, "/") || strings.HasSuffix(rest, "/copyright")) {
				return false
			}
			return true
		}
	}
	return false
}

func unpackOne(pkg string, deb []byte, tree map[string]File) error {
	data, err := dataTar(deb)
	if err != nil {
		return err
	}
	tr := tar.NewReader(data)
	bodies := map[string][]byte{} // for hard links, by cleaned name
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := cleanName(h.Name)
		if name == "" || isDropped(name, pkg) {
			continue
		}
		f := File{Name: name, Mode: h.Mode & 0o1777, Package: pkg}
		switch h.Typeflag {
		case tar.TypeDir:
			f.Type = tar.TypeDir
		case tar.TypeReg:
			f.Type = tar.TypeReg
			if f.Body, err = io.ReadAll(tr); err != nil {
				return err
			}
			bodies[name] = f.Body
		case tar.TypeSymlink:
			f.Type, f.Linkname, f.Mode = tar.TypeSymlink, h.Linkname, 0o777
		case tar.TypeLink:
			body, ok := bodies[cleanName(h.Linkname)]
			if !ok {
				return fmt.Errorf("hard link %s to %s, which comes later or not at all", h.Name, h.Linkname)
			}
			f.Type, f.Body = tar.TypeReg, body
		default:
			return fmt.Errorf("%s: entry type %q is not one a package holds", h.Name, h.Typeflag)
		}
		if old, ok := tree[name]; ok {
			if old.Type == tar.TypeDir && f.Type == tar.TypeDir {
				continue
			}
			if old.Type != f.Type || old.Linkname != f.Linkname || old.Mode != f.Mode || !bytes.Equal(old.Body, f.Body) {
				return fmt.Errorf("%s differs from the one %s holds", name, old.Package)
			}
			continue
		}
		tree[name] = f
	}
}

// dataTar is the uncompressed data.tar member of a .deb (an ar archive).
func dataTar(deb []byte) (io.Reader, error) {
	const magic = "!<arch>\n"
	if !bytes.HasPrefix(deb, []byte(magic)) {
		return nil, errors.New("not a .deb (no ar header)")
	}
	rest := deb[len(magic):]
	for len(rest) >= 60 {
		hdr := rest[:60]
		name := strings.TrimRight(strings.TrimSpace(string(hdr[:16])), "/")
		size, err := strconv.ParseInt(strings.TrimSpace(string(hdr[48:58])), 10, 64)
		if err != nil || size < 0 || int64(len(rest)-60) < size {
			return nil, fmt.Errorf("ar member %q: bad size", name)
		}
		body := rest[60 : 60+size]
		rest = rest[60+size:]
		if size%2 == 1 && len(rest) > 0 {
			rest = rest[1:]
		}
		switch name {
		case "data.tar":
			return bytes.NewReader(body), nil
		case "data.tar.gz":
			return gzip.NewReader(bytes.NewReader(body))
		case "data.tar.xz":
			return xz.NewReader(bytes.NewReader(body))
		case "data.tar.zst":
			d, err := zstd.NewReader(bytes.NewReader(body))
			if err != nil {
				return nil, err
			}
			return d.IOReadCloser(), nil
		}
	}
	return nil, errors.New("no data.tar member")
}
