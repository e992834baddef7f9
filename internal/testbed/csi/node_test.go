package csi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"fenced.io/fenced/internal/testbed/poll"
)

const testInterval = 10 * time.Millisecond

// shortTempDir returns a temporary directory with a short path: unix socket
// paths must fit in 108 bytes, and t.TempDir() paths can be long.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startPlugin starts a NodePlugin in a fresh directory and returns it with
// its volumes directory.
func startPlugin(t *testing.T) (*NodePlugin, string) {
	t.Helper()
	dir := shortTempDir(t)
	// The kubelet makes its registry; the plugin makes the others.
	if err := os.Mkdir(filepath.Join(dir, "reg"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := NewNodePlugin(Options{
		NodeName:      "node-a",
		BootID:        "boot-1",
		SocketDir:     filepath.Join(dir, "sock"),
		RegistryDir:   filepath.Join(dir, "reg"),
		VolumesDir:    filepath.Join(dir, "vols"),
		WriteInterval: testInterval,
	})
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p, filepath.Join(dir, "vols")
}

// dial connects to a unix socket the way the kubelet does.
func dial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestRegistration(t *testing.T) {
	p, _ := startPlugin(t)
	reg := registerapi.NewRegistrationClient(dial(t, p.RegistrationEndpoint()))
	if filepath.Base(p.RegistrationEndpoint()) != "csi.fenced.test-reg.sock" {
		t.Errorf("registration socket %s", p.RegistrationEndpoint())
	}

	info, err := reg.GetInfo(t.Context(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != DriverName || info.Endpoint != p.CSIEndpoint() ||
		len(info.SupportedVersions) != 1 || info.SupportedVersions[0] != "1.0.0" {
		t.Errorf("GetInfo = %v", info)
	}

	select {
	case <-p.Registered():
		t.Fatal("registered before the kubelet said so")
	default:
	}
	if _, err := reg.NotifyRegistrationStatus(t.Context(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	<-p.Registered()
}

func TestIdentityAndNodeInfo(t *testing.T) {
	p, _ := startPlugin(t)
	conn := dial(t, p.CSIEndpoint())
	id, node := csipb.NewIdentityClient(conn), csipb.NewNodeClient(conn)

	pi, err := id.GetPluginInfo(t.Context(), &csipb.GetPluginInfoRequest{})
	if err != nil || pi.Name != DriverName {
		t.Errorf("GetPluginInfo = %v, %v", pi, err)
	}
	if pr, err := id.Probe(t.Context(), &csipb.ProbeRequest{}); err != nil || !pr.GetReady().GetValue() {
		t.Errorf("Probe = %v, %v", pr, err)
	}
	ni, err := node.NodeGetInfo(t.Context(), &csipb.NodeGetInfoRequest{})
	if err != nil || ni.NodeId != "node-a" || ni.AccessibleTopology != nil {
		t.Errorf("NodeGetInfo = %v, %v", ni, err)
	}
	nc, err := node.NodeGetCapabilities(t.Context(), &csipb.NodeGetCapabilitiesRequest{})
	if err != nil || len(nc.Capabilities) != 1 ||
		nc.Capabilities[0].GetRpc().GetType() != csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME {
		t.Errorf("NodeGetCapabilities = %v, %v", nc, err)
	}
	staging := filepath.Join(filepath.Dir(p.CSIEndpoint()), "staging", "globalmount")
	if _, err := node.NodeStageVolume(t.Context(), &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(staging); err != nil || !fi.IsDir() {
		t.Errorf("staging dir: %v", err)
	}
	if _, err := node.NodeUnstageVolume(t.Context(), &csipb.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
}

// readRecords parses a volume file, failing on any malformed line.
func readRecords(t *testing.T, path string) []Record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for line := range bytes.Lines(data) {
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// waitRecords waits until the volume file holds at least n records.
func waitRecords(t *testing.T, path string, n int) []Record {
	t.Helper()
	var recs []Record
	poll.Until(t, time.Minute, fmt.Sprintf("%d records in %s", n, path), func() bool {
		if _, err := os.Stat(path); err != nil {
			return false
		}
		recs = readRecords(t, path)
		return len(recs) >= n
	})
	return recs
}

func TestPublishWritesUntilUnpublish(t *testing.T) {
	p, vols := startPlugin(t)
	node := csipb.NewNodeClient(dial(t, p.CSIEndpoint()))
	target := filepath.Join(filepath.Dir(p.CSIEndpoint()), "pods", "uid-1", "volumes", "kubernetes.io~csi", "pv1", "mount")
	pub := &csipb.NodePublishVolumeRequest{
		VolumeId:   "pv1",
		TargetPath: target,
		VolumeContext: map[string]string{
			podNamespaceKey: "ns", podNameKey: "web-0", podUIDKey: "uid-1",
		},
	}
	// Twice: the kubelet retries, and a second writer would be a false overlap.
	for range 2 {
		if _, err := node.NodePublishVolume(t.Context(), pub); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
		t.Fatalf("target dir: %v", err)
	}
	pub2 := &csipb.NodePublishVolumeRequest{VolumeId: "other", TargetPath: target}
	if _, err := node.NodePublishVolume(t.Context(), pub2); err == nil {
		t.Error("publish of another volume at the same target succeeded")
	}

	file := filepath.Join(vols, "pv1")
	recs := waitRecords(t, file, 5)
	for i, r := range recs {
		want := Record{T: r.T, Pod: "ns/web-0", Node: "node-a", Boot: "boot-1", Seq: int64(i + 1), UID: "uid-1"}
		if r != want {
			t.Fatalf("record %d = %+v, want %+v", i, r, want)
		}
		if i > 0 && r.T < recs[i-1].T {
			t.Errorf("record %d goes back in time", i)
		}
	}

	unpub := &csipb.NodeUnpublishVolumeRequest{VolumeId: "pv1", TargetPath: target}
	for range 2 {
		if _, err := node.NodeUnpublishVolume(t.Context(), unpub); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target dir still there: %v", err)
	}
	n := len(readRecords(t, file))
	time.Sleep(5 * testInterval)
	if m := len(readRecords(t, file)); m != n {
		t.Errorf("%d records written after unpublish", m-n)
	}
	rep, err := CheckVolume(file)
	if err != nil || rep.Err() != nil || len(rep.Writers) != 1 {
		t.Errorf("CheckVolume = %+v, %v", rep, err)
	}
}

func TestPodOf(t *testing.T) {
	target := "/tmp/hollow-kubelet.1/pods/4f1c/volumes/kubernetes.io~csi/pv1/mount"
	tests := []struct {
		name     string
		ctx      map[string]string
		wantPod  string
		wantUID  string
		inTarget string
	}{
		{"pod info", map[string]string{podNamespaceKey: "ns", podNameKey: "web-0", podUIDKey: "u"}, "ns/web-0", "u", target},
		{"no pod info", nil, "4f1c", "4f1c", target},
		{"name without namespace", map[string]string{podNameKey: "web-0"}, "4f1c", "4f1c", target},
		{"unknown layout", nil, "", "", "/somewhere/else"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, uid := podOf(tt.ctx, tt.inTarget)
			if pod != tt.wantPod || uid != tt.wantUID {
				t.Errorf("podOf = %q, %q; want %q, %q", pod, uid, tt.wantPod, tt.wantUID)
			}
		})
	}
}

func TestStopEndsWriters(t *testing.T) {
	p, vols := startPlugin(t)
	node := csipb.NewNodeClient(dial(t, p.CSIEndpoint()))
	target := filepath.Join(filepath.Dir(p.CSIEndpoint()), "t")
	if _, err := node.NodePublishVolume(t.Context(), &csipb.NodePublishVolumeRequest{VolumeId: "pv2", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	file := filepath.Join(vols, "pv2")
	n := len(readRecords(t, file))
	time.Sleep(5 * testInterval)
	if m := len(readRecords(t, file)); m != n {
		t.Errorf("%d records written after Stop", m-n)
	}
	for _, s := range []string{p.CSIEndpoint(), p.RegistrationEndpoint()} {
		if _, err := os.Stat(s); !os.IsNotExist(err) {
			t.Errorf("socket %s left after Stop: %v", s, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{}); err == nil {
		t.Error("NodeGetInfo answered after Stop")
	}
}
