package shutdown

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultKubeletRootDir is the kubelet's --root-dir unless a distribution
// moved it.
const DefaultKubeletRootDir = "/var/lib/kubelet"

// DefaultMountInfo is this process's view of the mount table. As a systemd
// unit it is the host's (services get a slave copy of it); in a DaemonSet
// pod it shows the kubelet directory mounted with HostToContainer
// propagation, so the host's CSI mounts appear in it too.
const DefaultMountInfo = "/proc/self/mountinfo"

// CSIMounts returns the mount points of CSI volumes in a mountinfo table
// (proc(5)): the kubelet's per-pod publish targets
// (<root>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount, and
// volumeDevices/ for raw block volumes) and its per-node staging mounts
// (<root>/plugins/kubernetes.io/csi/…/globalmount, and volumeDevices/).
// As long as one of them is mounted, the host can still write to a volume.
func CSIMounts(mountinfo io.Reader, kubeletRootDir string) ([]string, error) {
	points, err := MountPoints(mountinfo)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range points {
		if IsCSIMount(kubeletRootDir, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// MountPoints returns the mount points of a mountinfo table, in its order,
// with the kernel's octal escapes undone.
func MountPoints(mountinfo io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		// id parent major:minor root mount-point options ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			return nil, fmt.Errorf("mountinfo line %d: %d fields, want at least 5", n, len(fields))
		}
		out = append(out, unescapeOctal(fields[4]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	return out, nil
}

// IsCSIMount reports whether mountPoint is where the kubelet whose root
// directory is kubeletRootDir mounts a CSI volume.
func IsCSIMount(kubeletRootDir, mountPoint string) bool {
	rel, err := filepath.Rel(filepath.Clean(kubeletRootDir), mountPoint)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return false
	}
	rel = filepath.ToSlash(rel)
	return strings.HasPrefix(rel, "plugins/kubernetes.io/csi/") ||
		(strings.HasPrefix(rel, "pods/") && strings.Contains(rel, "/kubernetes.io~csi/"))
}

// unescapeOctal undoes the \ooo escapes the kernel writes for space, tab,
// newline and backslash in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) && isOctal(s[i+1:i+4]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range 3 {
		if s[i] < '0' || s[i] > '7' {
			return false
		}
	}
	return s[0] <= '3'
}

// MountTable reads the CSI mounts of one kubelet root directory from a
// mountinfo file and waits for that table to change.
type MountTable struct {
	// Path is the mountinfo file (DefaultMountInfo).
	Path string
	// KubeletRootDir is the kubelet's --root-dir (DefaultKubeletRootDir).
	KubeletRootDir string
}

// CSIMounts returns the CSI mounts currently in the table.
func (t MountTable) CSIMounts() ([]string, error) {
	f, err := os.Open(t.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return CSIMounts(f, t.KubeletRootDir)
}

// WaitChange returns when the mount table may have changed, when at most
// timeout has passed, or when ctx ends. The kernel flags a mountinfo file
// with POLLPRI on every mount or unmount in its namespace, so waiting
// costs nothing; the timeout is a safety net for file systems where that
// does not hold.
func (t MountTable) WaitChange(ctx context.Context, timeout time.Duration) error {
	// A raw descriptor, not an *os.File: Go's runtime poller would register
	// an *os.File with epoll, and epoll's own poll of the file consumes the
	// change notification before ours sees it.
	fd, err := unix.Open(t.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: t.Path, Err: err}
	}
	defer unix.Close(fd)
	// Reading to the end arms the notification: poll reports changes since
	// the file was last read.
	buf := make([]byte, 64*1024)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "read", Path: t.Path, Err: err}
		}
		if n == 0 {
			break
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Wake up at least every 200ms to notice ctx.
		wait := min(time.Until(deadline), 200*time.Millisecond)
		if wait <= 0 {
			return nil
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
		n, err := unix.Poll(fds, int(wait.Milliseconds())+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll %s: %w", t.Path, err)
		}
		if n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0 {
			return nil
		}
	}
}
