// Package secretvolume writes a directory the way the kubelet writes a
// Secret or ConfigMap volume (its AtomicWriter): the files live in a
// timestamped directory, ..data is a symlink to it, and each file's name
// is a symlink into ..data. An update writes a new timestamped directory
// and swaps ..data in one rename, so a reader sees the old set or the new
// one, file by file; a reader of several files may still see one file of
// each, if it reads across the swap. Test-only.
package secretvolume

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// dataDir is the symlink to the current timestamped directory.
const dataDir = "..data"

// Write makes dir (created if need be, mode 0700) hold exactly files, name
// → content, each with mode, swapping them in at once: names no longer in
// files disappear, in the same swap for a reader that goes through ..data
// and right after it for one that goes through the names' own symlinks, as
// with the kubelet.
func Write(dir string, files map[string][]byte, mode fs.FileMode) error {
	for name := range files {
		if strings.HasPrefix(name, ".") || strings.ContainsRune(name, '/') {
			return fmt.Errorf("secretvolume: %q is not a key name", name)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	for name, content := range files {
		p := filepath.Join(ts, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, dataDir))
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataDir)); err != nil {
		return err
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join(dataDir, name), link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, keep := files[e.Name()]; !keep && !strings.HasPrefix(e.Name(), ".") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}
