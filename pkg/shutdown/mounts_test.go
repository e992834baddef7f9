package shutdown

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A mount table as the kernel writes it, with the kubelet's CSI mounts of
// one filesystem volume (staged and published) and one raw block volume,
// next to mounts that are not CSI volumes.
const sampleMountInfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw
60 22 0:45 / /var/lib/kubelet/pods/6f1c/volumes/kubernetes.io~projected/kube-api-access-x rw,relatime shared:30 - tmpfs tmpfs rw
61 22 8:16 / /var/lib/kubelet/plugins/kubernetes.io/csi/ebs.csi.aws.com/4b2c/globalmount rw,relatime shared:31 - ext4 /dev/sdb rw
62 22 8:16 / /var/lib/kubelet/pods/6f1c/volumes/kubernetes.io~csi/pvc-1/mount rw,relatime shared:31 - ext4 /dev/sdb rw
63 22 0:5 /sdc /var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-2/6f1c rw shared:2 - devtmpfs udev rw
64 22 0:46 / /var/lib/kubelet/pods/7a2d/volumes/kubernetes.io~csi/pvc\0403/mount rw - ext4 /dev/sdd rw
65 22 0:47 / /var/lib/kubeletx/pods/7a2d/volumes/kubernetes.io~csi/pvc-4/mount rw - ext4 /dev/sde rw
66 22 0:48 / /var/lib/kubelet/kubernetes.io~csi rw - tmpfs tmpfs rw
67 22 0:49 / /var/lib/kubelet/pods/8b3e/volumes/kubernetes.io~nfs/data rw - nfs4 srv:/x rw
`

func TestCSIMounts(t *testing.T) {
	tests := []struct {
		name, root, table string
		want              []string
	}{
		{"kubelet mounts", "/var/lib/kubelet", sampleMountInfo, []string{
			"/var/lib/kubelet/plugins/kubernetes.io/csi/ebs.csi.aws.com/4b2c/globalmount",
			"/var/lib/kubelet/pods/6f1c/volumes/kubernetes.io~csi/pvc-1/mount",
			"/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-2/6f1c",
			"/var/lib/kubelet/pods/7a2d/volumes/kubernetes.io~csi/pvc 3/mount",
		}},
		{"root with a trailing slash", "/var/lib/kubelet/", sampleMountInfo[strings.Index(sampleMountInfo, "61 "):strings.Index(sampleMountInfo, "63 ")], []string{
			"/var/lib/kubelet/plugins/kubernetes.io/csi/ebs.csi.aws.com/4b2c/globalmount",
			"/var/lib/kubelet/pods/6f1c/volumes/kubernetes.io~csi/pvc-1/mount",
		}},
		{"another root dir", "/data/kubelet", sampleMountInfo, nil},
		{"empty table", "/var/lib/kubelet", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CSIMounts(strings.NewReader(tt.table), tt.root)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("CSIMounts:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestCSIMountsMalformed(t *testing.T) {
	_, err := CSIMounts(strings.NewReader("22 1 8:1 /\n"), "/var/lib/kubelet")
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("want an error naming line 1, got %v", err)
	}
}

func TestUnescapeOctal(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:   "/a b",
		`/a\011b`:   "/a\tb",
		`/a\134b`:   `/a\b`,
		`/a\0`:      `/a\0`,
		`/a\999`:    `/a\999`,
		`/plain`:    "/plain",
		`/end\040`:  "/end ",
		`\040start`: " start",
	} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMountTable reads a real mountinfo file: this process's own table
// has no CSI mounts under a fresh directory, and WaitChange returns by its
// timeout when nothing changes.
func TestMountTable(t *testing.T) {
	table := MountTable{Path: DefaultMountInfo, KubeletRootDir: t.TempDir()}
	got, err := table.CSIMounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("CSI mounts under a fresh directory: %q", got)
	}
	start := time.Now()
	if err := table.WaitChange(context.Background(), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("WaitChange returned after %s without a change", waited)
	}

	missing := MountTable{Path: filepath.Join(t.TempDir(), "nope"), KubeletRootDir: "/var/lib/kubelet"}
	if _, err := missing.CSIMounts(); !os.IsNotExist(err) {
		t.Errorf("missing table: want a not-exist error, got %v", err)
	}
	if err := missing.WaitChange(context.Background(), time.Second); !os.IsNotExist(err) {
		t.Errorf("missing table: want a not-exist error from WaitChange, got %v", err)
	}
}

// TestMountTableSeesRealMounts mounts a tmpfs where the kubelet publishes a
// CSI volume and checks that WaitChange wakes up and CSIMounts lists it,
// then that both notice the unmount. It re-runs itself in a private mount
// namespace (unshare), so nothing is mounted on the host.
func TestMountTableSeesRealMounts(t *testing.T) {
	if os.Getenv("FENCED_IN_MOUNT_NS") == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root for a mount namespace")
		}
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Skip("unshare (util-linux) not installed")
		}
		cmd := exec.Command(unshare, "--mount", "--propagation", "private", os.Args[0], "-test.run=^TestMountTableSeesRealMounts$", "-test.v")
		cmd.Env = append(os.Environ(), "FENCED_IN_MOUNT_NS=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestMountTableSeesRealMounts") {
			t.Fatalf("in a mount namespace: %v\n%s", err, out)
		}
		return
	}

	root := t.TempDir()
	target := filepath.Join(root, "pods", "uid-1", "volumes", "kubernetes.io~csi", "pv 1", "mount")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	table := MountTable{Path: DefaultMountInfo, KubeletRootDir: root}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	changed := make(chan error, 1)
	go func() { changed <- table.WaitChange(ctx, 20*time.Second) }()
	time.Sleep(100 * time.Millisecond) // let WaitChange arm itself
	if err := unix.Mount("fenced-test", target, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
	woke := time.Since(start)
	t.Logf("WaitChange woke %s after the mount", woke)
	if woke > 10*time.Second {
		t.Fatalf("WaitChange returned by its timeout (%s), not by the mount's notification", woke)
	}
	if got, err := table.CSIMounts(); err != nil || !slices.Equal(got, []string{target}) {
		t.Fatalf("after mount: %q, %v; want [%q]", got, err, target)
	}

	go func() { changed <- table.WaitChange(ctx, 20*time.Second) }()
	time.Sleep(100 * time.Millisecond)
	if err := unix.Unmount(target, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
	if got, err := table.CSIMounts(); err != nil || len(got) != 0 {
		t.Fatalf("after unmount: %q, %v; want none", got, err)
	}
}
