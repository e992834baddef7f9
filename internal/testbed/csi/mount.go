package csi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"fenced.io/fenced/pkg/shutdown"
)

// PrivateMountNamespace reports whether this process runs in a mount
// namespace other than PID 1's, where mounts vanish with the namespace's
// last process instead of piling up on the host. The machine launcher
// enables Options.Mount only then.
//
// Where PID 1's namespace cannot be read (some sandboxes hide it even from
// root), the parent process's stands in for it: a launcher that `ip netns
// exec` put in a namespace of its own has a parent (the BMC) on the host,
// and a process that shares its parent's namespace never counts as private.
func PrivateMountNamespace() (bool, error) {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false, err
	}
	host, err := os.Readlink("/proc/1/ns/mnt")
	if errors.Is(err, os.ErrPermission) {
		host, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	}
	if err != nil {
		return false, err
	}
	return self != host, nil
}

// mountPoints returns the mount points of a mountinfo file.
func mountPoints(mountinfo string) ([]string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return shutdown.MountPoints(f)
}

// isMountPoint reports whether path is a mount point in this process's
// mount namespace. Unlike comparing st_dev with the parent's, this also
// sees bind mounts from the same file system.
func isMountPoint(path string) (bool, error) {
	points, err := mountPoints("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	path = filepath.Clean(path)
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	return slices.Contains(points, path), nil
}

// mountTmpfs mounts a small tmpfs named source at dir, unless something is
// mounted there already; it reports whether it mounted.
func mountTmpfs(source, dir string) (bool, error) {
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return false, err
	}
	if err := unix.Mount(source, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0750"); err != nil {
		return false, fmt.Errorf("mount tmpfs %s at %s: %w", source, dir, err)
	}
	return true, nil
}

// bindMount bind-mounts src onto dst, unless something is mounted at dst
// already; it reports whether it mounted.
func bindMount(src, dst string) (bool, error) {
	if mounted, err := isMountPoint(dst); err != nil || mounted {
		return false, err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return false, fmt.Errorf("bind mount %s at %s: %w", src, dst, err)
	}
	return true, nil
}

// unmount unmounts dir if it is a mount point, and reports whether it
// did. It is not lazy: a busy mount stays and unmount fails, as umount(8)
// without -l does.
func unmount(dir string) (bool, error) {
	mounted, err := isMountPoint(dir)
	if err != nil || !mounted {
		return false, err
	}
	if err := unix.Unmount(dir, 0); err != nil {
		return false, fmt.Errorf("unmount %s: %w", dir, err)
	}
	return true, nil
}
