package csi

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestHoldMountsFile needs no mounts: while the hold file exists,
// NodeUnpublishVolume fails like a busy unmount and the writer goes on.
func TestHoldMountsFile(t *testing.T) {
	dir := shortTempDir(t)
	hold := filepath.Join(dir, "hold-mounts")
	p := startPluginWith(t, dir, Options{HoldMountsFile: hold})
	node := csipb.NewNodeClient(dial(t, p.CSIEndpoint()))
	target := filepath.Join(dir, "pods", "uid-1", "volumes", "kubernetes.io~csi", "pv1", "mount")
	if _, err := node.NodePublishVolume(t.Context(), &csipb.NodePublishVolumeRequest{VolumeId: "pv1", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	unpub := &csipb.NodeUnpublishVolumeRequest{VolumeId: "pv1", TargetPath: target}
	_, err := node.NodeUnpublishVolume(t.Context(), unpub)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "target is busy") {
		t.Fatalf("NodeUnpublishVolume with the hold file = %v, want a busy error", err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("target removed although held: %v", err)
	}
	file := filepath.Join(dir, "vols", "pv1")
	n := len(readRecords(t, file))
	waitRecords(t, file, n+3) // the writer still writes

	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	if _, err := node.NodeUnpublishVolume(t.Context(), unpub); err != nil {
		t.Fatalf("NodeUnpublishVolume after the hold was lifted: %v", err)
	}
	n = len(readRecords(t, file))
	time.Sleep(5 * testInterval)
	if m := len(readRecords(t, file)); m != n {
		t.Errorf("%d records written after unpublish", m-n)
	}
}

// startPluginWith starts a NodePlugin in dir with o's Mount and
// HoldMountsFile.
func startPluginWith(t *testing.T, dir string, o Options) *NodePlugin {
	t.Helper()
	if err := os.Mkdir(filepath.Join(dir, "reg"), 0o755); err != nil {
		t.Fatal(err)
	}
	o.NodeName, o.BootID = "node-a", "boot-1"
	o.SocketDir, o.RegistryDir, o.VolumesDir = filepath.Join(dir, "sock"), filepath.Join(dir, "reg"), filepath.Join(dir, "vols")
	o.WriteInterval = testInterval
	p := NewNodePlugin(o)
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// inMountNamespaceEnv tells a re-executed test binary that it runs in a
// private mount namespace made for TestRealMounts.
const inMountNamespaceEnv = "CSI_TEST_IN_MOUNT_NAMESPACE"

// TestRealMounts runs the mount lifecycle with Options.Mount for real, in
// a private mount namespace: the test binary re-executes itself there, so
// nothing is ever mounted in the namespace the tests run in.
func TestRealMounts(t *testing.T) {
	if os.Getenv(inMountNamespaceEnv) == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root to make a mount namespace and mount")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestRealMounts$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), inMountNamespaceEnv+"=1")
		// Go makes / private (recursively) in the new namespace, so
		// nothing propagates back either.
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		t.Logf("in a private mount namespace:\n%s", out)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "--- PASS: TestRealMounts") {
			t.Fatal("the re-executed test did not pass")
		}
		return
	}
	if private, err := PrivateMountNamespace(); err != nil || !private {
		t.Fatalf("PrivateMountNamespace = %v, %v; want true", private, err)
	}
	dir := shortTempDir(t)
	hold := filepath.Join(dir, "hold-mounts")
	p := startPluginWith(t, dir, Options{Mount: true, HoldMountsFile: hold})
	node := csipb.NewNodeClient(dial(t, p.CSIEndpoint()))
	staging := filepath.Join(dir, "plugins", "kubernetes.io", "csi", DriverName, "abc", "globalmount")
	target := filepath.Join(dir, "pods", "uid-1", "volumes", "kubernetes.io~csi", "pv1", "mount")
	pub := &csipb.NodePublishVolumeRequest{VolumeId: "pv1", StagingTargetPath: staging, TargetPath: target}

	if _, err := node.NodePublishVolume(t.Context(), pub); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("NodePublishVolume before staging = %v, want FailedPrecondition", err)
	}
	stage := &csipb.NodeStageVolumeRequest{VolumeId: "pv1", StagingTargetPath: staging}
	for range 2 { // the kubelet retries; one mount either way
		if _, err := node.NodeStageVolume(t.Context(), stage); err != nil {
			t.Fatal(err)
		}
	}
	requireMounts(t, staging, 1)
	var fs unix.Statfs_t
	if err := unix.Statfs(staging, &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
		t.Errorf("staging file system type %#x (%v), want tmpfs", fs.Type, err)
	}
	for range 2 {
		if _, err := node.NodePublishVolume(t.Context(), pub); err != nil {
			t.Fatal(err)
		}
	}
	requireMounts(t, target, 1)
	// A bind mount: what is written through the target is on the staged
	// volume.
	if err := os.WriteFile(filepath.Join(target, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(staging, "data")); err != nil {
		t.Errorf("file written at the target is not on the staged volume: %v", err)
	}

	// The hold file: a busy error, the mount stays.
	unpub := &csipb.NodeUnpublishVolumeRequest{VolumeId: "pv1", TargetPath: target}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := node.NodeUnpublishVolume(t.Context(), unpub); err == nil {
		t.Fatal("NodeUnpublishVolume succeeded with the hold file")
	}
	requireMounts(t, target, 1)
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}

	// A really busy mount: the unmount is not lazy, so it fails too.
	f, err := os.Open(filepath.Join(target, "data"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = node.NodeUnpublishVolume(t.Context(), unpub)
	f.Close()
	if err == nil || !strings.Contains(err.Error(), "busy") {
		t.Errorf("NodeUnpublishVolume with an open file = %v, want device busy", err)
	}
	requireMounts(t, target, 1)

	for range 2 {
		if _, err := node.NodeUnpublishVolume(t.Context(), unpub); err != nil {
			t.Fatal(err)
		}
	}
	requireMounts(t, target, 0)
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target still there after unpublish: %v", err)
	}
	unstage := &csipb.NodeUnstageVolumeRequest{VolumeId: "pv1", StagingTargetPath: staging}
	for range 2 {
		if _, err := node.NodeUnstageVolume(t.Context(), unstage); err != nil {
			t.Fatal(err)
		}
	}
	requireMounts(t, staging, 0)
}

// requireMounts checks that path is mounted n times in this namespace.
func requireMounts(t *testing.T, path string, n int) {
	t.Helper()
	points, err := mountPoints("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, p := range points {
		if p == path {
			got++
		}
	}
	if got != n {
		t.Errorf("%s mounted %d times, want %d", path, got, n)
	}
}
