package config

import (
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// The permission rule for files holding secrets (BMC password files, the
// gossip key), checked on the file a path resolves to, so the symlinks of
// a Kubernetes Secret volume (key -> ..data/key) are followed:
//
//   - writable by group or others: refused. Whoever can write the file can
//     swap the secret (join the gossip ring with a key of their own, lock
//     the BMC account with a wrong password); no deployment needs it.
//   - readable by others: accepted with a warning. A Secret volume without
//     defaultMode mounts files 0644, inside a pod whose volume directory
//     other host users cannot enter; refusing would stop such agents for
//     a mode that usually exposes nothing.
//   - readable by group: accepted. The systemd install (root:fenced 0640)
//     and our DaemonSets (defaultMode 0440 with fsGroup) need it.
//
// The owner of the file is not checked: in user namespaces and rootless
// runtimes it can read as an unmapped ID while the file is perfectly
// private.
//
// The directories that lead to it are (checkSecretDirs), along the path as
// written and along the path with its symlinks resolved, up to /: whoever
// may write one of them can swap the file, or a directory or symlink on the
// way, for their own, whatever the file's mode. Each must be owned by root
// or by this process's user, and writable by neither group nor others —
// unless it has the sticky bit, as /tmp and the tmpfs root of a Kubernetes
// Secret volume have (mode 1777, owned by root); then the next entry on the
// way must itself be owned by root or this process's user, since its owner
// may still rename it away. t.TempDir (0700 under /tmp), the systemd
// install (/etc/fenced root:fenced 0750) and the Secret volumes (the
// kubelet's ..data symlinks, its directories 0755 or 2750 with an fsGroup)
// all pass.
const (
	secretWritableBits fs.FileMode = 0o022
	secretOtherRead    fs.FileMode = 0o004
)

// CheckSecretFile applies the permission rule to the file at path. It
// returns an error, naming the file, its mode and the chmod that fixes it,
// when the file must not be used; otherwise a warning (empty if none) to
// log.
func CheckSecretFile(path string) (warning string, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if warning, err = checkSecretMode(path, fi); err != nil {
		return "", err
	}
	return warning, checkSecretDirs(path)
}

// ReadSecretFile reads a secret file after checking the permissions of the
// very file it opened (not of whatever the path names a moment later), with
// the rule of CheckSecretFile.
func ReadSecretFile(path string) (data []byte, warning string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	if warning, err = checkSecretMode(path, fi); err != nil {
		return nil, "", err
	}
	if err = checkSecretDirs(path); err != nil {
		return nil, "", err
	}
	data, err = io.ReadAll(f)
	if err != nil {
		return nil, "", err
	}
	return data, warning, nil
}

func checkSecretMode(path string, fi fs.FileInfo) (string, error) {
	mode := fi.Mode()
	if mode.IsDir() {
		return "", &fs.PathError{Op: "read", Path: path, Err: syscall.EISDIR}
	}
	perm := mode.Perm()
	if perm&secretWritableBits != 0 {
		return "", fmt.Errorf("secret file %s has mode %04o: writable by %s, so anyone in it can replace the secret; "+
			"run `chmod 600 %s` (or `chmod 640` to let a group read it), or set defaultMode: 0440 on the Secret volume",
			path, perm, writers(perm), path)
	}
	if perm&secretOtherRead != 0 {
		return fmt.Sprintf("secret file %s has mode %04o: readable by every user of this host; "+
			"run `chmod 600 %s` (or `chmod 640`), or set defaultMode: 0440 on the Secret volume", path, perm, path), nil
	}
	return "", nil
}

// checkSecretDirs applies the directory rule (see the top of this file)
// to every directory on the way to path, as written and resolved.
func checkSecretDirs(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	checked := map[string]bool{}
	for _, p := range []string{abs, resolved} {
		for entry := p; ; {
			dir := filepath.Dir(entry)
			if dir == entry {
				break
			}
			if !checked[entry] {
				if err := checkSecretDir(path, dir, entry); err != nil {
					return err
				}
				checked[entry] = true
			}
			entry = dir
		}
	}
	return nil
}

// checkSecretDir checks dir, which holds entry, on the way to secret.
func checkSecretDir(secret, dir, entry string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	owner, ok := ownerOf(fi)
	if !ok {
		return nil // no owners on this system
	}
	uid := os.Geteuid()
	if owner != 0 && owner != uid {
		return fmt.Errorf("secret file %s: directory %s is owned by uid %d, not root or this process (uid %d), so its owner can replace the secret; "+
			"run `chown root %s` or move the file", secret, dir, owner, uid, dir)
	}
	perm := fi.Mode().Perm()
	if perm&secretWritableBits == 0 {
		return nil
	}
	if fi.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("secret file %s: directory %s has mode %04o: writable by %s, so anyone in it can replace the secret; "+
			"run `chmod go-w %s` or move the file", secret, dir, perm, writers(perm), dir)
	}
	// Sticky: only an entry's owner (or the directory's) may rename or
	// delete it.
	efi, err := os.Lstat(entry)
	if err != nil {
		return err
	}
	if eo, _ := ownerOf(efi); eo != 0 && eo != uid {
		return fmt.Errorf("secret file %s: directory %s is writable by others (sticky) and %s belongs to uid %d, not root or this process (uid %d), "+
			"who may replace it; move the file to a directory only root or uid %d can write", secret, dir, entry, eo, uid, uid)
	}
	return nil
}

// ownerOf is the user owning fi; false where the system has none.
func ownerOf(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

func writers(perm fs.FileMode) string {
	switch {
	case perm&0o020 != 0 && perm&0o002 != 0:
		return "group and others"
	case perm&0o020 != 0:
		return "group"
	}
	return "others"
}

// warned holds the warnings already logged, so a file re-read for every
// BMC session (or shared by many nodes) is warned about once per process.
var warned sync.Map

// WarnSecretFileOnce logs warning (from CheckSecretFile or ReadSecretFile)
// at level Warn, once per process for each distinct text; the text names
// the file and its mode, so a later chmod that still draws a warning is
// logged again. An empty warning is ignored; a nil log means slog.Default().
func WarnSecretFileOnce(log *slog.Logger, path, warning string) {
	if warning == "" {
		return
	}
	if _, dup := warned.LoadOrStore(warning, struct{}{}); dup {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	log.Warn(warning, "file", path)
}
