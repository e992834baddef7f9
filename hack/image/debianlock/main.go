// Command debianlock regenerates the deb lines of a Debian package lock
// (package hack/image/debian) from Debian's Packages indexes: for every
// architecture the lock names, the closure of its roots over Depends and
// Pre-Depends, from its suites, less its excludes. It reads the indexes
// from the mirror over HTTPS and writes the lock back in place; nothing on
// this machine's apt is used or changed.
//
//	go run ./hack/image/debianlock -lock hack/image/fence-agents.lock
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/ulikunitz/xz"

	"fenced.io/fenced/hack/image/debian"
)

func main() {
	lockFile := flag.String("lock", "hack/image/fence-agents.lock", "the lock to regenerate")
	flag.Parse()
	if err := run(*lockFile); err != nil {
		fmt.Fprintln(os.Stderr, "debianlock:", err)
		os.Exit(1)
	}
}

func run(lockFile string) error {
	lock, err := debian.ReadLock(lockFile)
	if err != nil {
		return err
	}
	if len(lock.Suites) == 0 || len(lock.Arches) == 0 || len(lock.Roots) == 0 {
		return fmt.Errorf("%s names no suite, arch or root", lockFile)
	}
	lock.Debs = nil
	for _, arch := range lock.Arches {
		ix := debian.NewIndex()
		for _, s := range lock.Suites {
			url := fmt.Sprintf("%s/dists/%s/main/binary-%s/Packages.xz", s.Base, s.Dist, arch)
			compressed, err := debian.Download(url)
			if err != nil {
				return err
			}
			r, err := xz.NewReader(bytes.NewReader(compressed))
			if err != nil {
				return fmt.Errorf("%s: %w", url, err)
			}
			if err := ix.Add(r, s.Base); err != nil {
				return fmt.Errorf("%s: %w", url, err)
			}
		}
		pkgs, err := ix.Resolve(lock.Roots, lock.Excludes)
		if err != nil {
			return fmt.Errorf("%s: %w", arch, err)
		}
		var size int64
		for _, p := range pkgs {
			lock.Debs = append(lock.Debs, debian.Deb{Arch: arch, Package: p.Name, Version: p.Version,
				Path: p.Base + "/" + p.Filename, SHA256: p.SHA256, Size: p.Size})
			size += p.Size
		}
		names := make([]string, len(pkgs))
		for i, p := range pkgs {
			names[i] = p.Name
		}
		fmt.Printf("%s: %d packages, %.1f MB of .debs: %s\n", arch, len(pkgs), float64(size)/1e6, strings.Join(names, " "))
	}
	return os.WriteFile(lockFile, lock.Format(), 0o644)
}
