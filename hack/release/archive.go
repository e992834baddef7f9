package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// platform is an os/arch pair, as Go and OCI name them.
type platform struct{ OS, Arch string }

func (p platform) String() string { return p.OS + "/" + p.Arch }

func parsePlatform(s string) (platform, error) {
	os, arch, ok := strings.Cut(s, "/")
	if !ok || os == "" || arch == "" || strings.Contains(arch, "/") {
		return platform{}, fmt.Errorf("platform %q: want os/arch, e.g. linux/amd64", s)
	}
	return platform{os, arch}, nil
}

// binaryName is the command's name inside every archive (krew's "bin").
const binaryName = "fenced"

// archiveName is the release archive of version's binary for p.
func archiveName(version string, p platform) string {
	return fmt.Sprintf("fenced-%s-%s-%s.tar.gz", version, p.OS, p.Arch)
}

// archiveEntry is one file of an archive.
type archiveEntry struct {
	name string
	mode int64
	data []byte
}

// writeBinaryArchive writes dir/archiveName: the binary as "fenced"
// (0755) and the extra files under their base names (0644).
func writeBinaryArchive(dir, binary string, p platform, version string, extra []string, mtime time.Time) (string, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	entries := []archiveEntry{{binaryName, 0o755, data}}
	for _, f := range extra {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		entries = append(entries, archiveEntry{filepath.Base(f), 0o644, data})
	}
	slices.SortFunc(entries, func(a, b archiveEntry) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(entries); i++ {
		if entries[i].name == entries[i-1].name {
			return "", fmt.Errorf("two files named %s in one archive", entries[i].name)
		}
	}
	b, err := tarGz(entries, mtime)
	if err != nil {
		return "", err
	}
	name := filepath.Join(dir, archiveName(version, p))
	return name, os.WriteFile(name, b, 0o644)
}

// tarGz is a gzip-compressed tar of entries in the order given, each a
// regular file owned by 0:0 with no user or group name, stamped mtime; the
// gzip header names no file and no time. Nothing of the machine or the
// moment of the run gets in, so the same entries give the same bytes.
func tarGz(entries []archiveEntry, mtime time.Time) ([]byte, error) {
	return tarGzWithHeader(entries, mtime, gzip.Header{})
}

func tarGzWithHeader(entries []archiveEntry, mtime time.Time, header gzip.Header) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	// The gzip header keeps only what the caller carried over (helm marks
	// its packages with an extra field and a comment); never a name or time.
	zw.Header = gzip.Header{Extra: header.Extra, Comment: header.Comment, OS: 255}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     e.name,
			Mode:     e.mode,
			Size:     int64(len(e.data)),
			ModTime:  mtime.UTC().Truncate(time.Second),
			Format:   tar.FormatPAX,
		}
		if len(e.name) <= 100 {
			h.Format = tar.FormatUSTAR
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// normalizeTarGz rewrites a tar.gz of regular files (what helm package
// writes) as tarGz does, keeping the entries' order and modes and the gzip
// header's extra field and comment.
func normalizeTarGz(b []byte, mtime time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	header := zr.Header
	tr := tar.NewReader(zr)
	var entries []archiveEntry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%s: only regular files are expected, found type %q", h.Name, h.Typeflag)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		entries = append(entries, archiveEntry{h.Name, h.Mode, data})
	}
	return tarGzWithHeader(entries, mtime, header)
}

// imageRepository is an image "repository:" line of a chart's values.
var imageRepository = regexp.MustCompile(`(?m)^(\s*repository:\s*)"?([^\s"#]+)"?(\s*(#.*)?)$`)

// setImageRegistry points every image repository of a chart's values at
// registry, keeping each image's name: ghcr.io/example/fenced becomes
// REGISTRY/fenced.
func setImageRegistry(values []byte, registry string) ([]byte, error) {
	registry = strings.TrimSuffix(registry, "/")
	n := 0
	out := imageRepository.ReplaceAllFunc(values, func(line []byte) []byte {
		m := imageRepository.FindSubmatch(line)
		repo := string(m[2])
		n++
		return []byte(string(m[1]) + registry + "/" + repo[strings.LastIndex(repo, "/")+1:] + string(m[3]))
	})
	if n == 0 {
		return nil, errors.New("no image repository: line found")
	}
	return out, nil
}
