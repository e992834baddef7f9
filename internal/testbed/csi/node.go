package csi

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	// RegistrationSocketName is the plugin's socket in the kubelet's plugin
	// registry directory. The kubelet watches that directory, dials every
	// socket that appears in it and asks it GetInfo.
	RegistrationSocketName = DriverName + "-reg.sock"

	// CSISocketName is the CSI socket in Options.SocketDir.
	CSISocketName = "csi.sock"

	// Keys of the volume context that the kubelet adds when the CSIDriver
	// has podInfoOnMount: true.
	podNameKey      = "csi.storage.k8s.io/pod.name"
	podNamespaceKey = "csi.storage.k8s.io/pod.namespace"
	podUIDKey       = "csi.storage.k8s.io/pod.uid"
)

// Options configure a NodePlugin.
type Options struct {
	// NodeName is the Kubernetes node name, returned as the CSI node ID.
	NodeName string
	// BootID tells apart the lives of one machine. Empty: a random ID, so
	// every process start counts as a boot.
	BootID string
	// SocketDir holds the CSI socket (csi.sock); Start creates it.
	SocketDir string
	// RegistryDir is the kubelet's plugin registry directory,
	// <kubelet root dir>/plugins_registry.
	RegistryDir string
	// VolumesDir holds one file per volume, named by volume ID; it is
	// shared by all machines.
	VolumesDir string
	// WriteInterval is the time between two records (default 100ms).
	WriteInterval time.Duration
	// Mount makes the mounts real: NodeStageVolume mounts a small tmpfs at
	// the staging path and NodePublishVolume bind-mounts it onto the
	// target, so that the kubelet's pods/…/kubernetes.io~csi/… and
	// plugins/kubernetes.io/csi/… paths are mount points, as on a real
	// node. The writers still write to VolumesDir. Only for a process in a
	// mount namespace of its own (see PrivateMountNamespace): the mounts
	// must vanish with the machine.
	Mount bool
	// HoldMountsFile is a fault switch: while a file exists at this path,
	// NodeUnpublishVolume fails as a busy unmount does, leaving the mount
	// and the writer in place. Empty: never.
	HoldMountsFile string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// NodePlugin is the CSI node plugin of one machine. It serves CSI Identity
// and Node on <SocketDir>/csi.sock and kubelet plugin registration on
// <RegistryDir>/csi.fenced.test-reg.sock, and runs a writer for every
// published volume.
type NodePlugin struct {
	opts       Options
	log        *slog.Logger
	servers    []*grpc.Server
	sockets    []string
	registered chan struct{}
	regOnce    sync.Once
	stopOnce   sync.Once

	mu      sync.Mutex
	stopped bool               // no writer starts after Stop
	writers map[string]*writer // by target path
}

// NewNodePlugin returns a plugin; Start serves it.
func NewNodePlugin(opts Options) *NodePlugin {
	if opts.WriteInterval <= 0 {
		opts.WriteInterval = 100 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BootID == "" {
		opts.BootID = rand.Text()
	}
	return &NodePlugin{
		opts:       opts,
		log:        opts.Logger.With("node", opts.NodeName, "boot", opts.BootID),
		registered: make(chan struct{}),
		writers:    map[string]*writer{},
	}
}

// BootID returns the boot ID written in the records.
func (p *NodePlugin) BootID() string { return p.opts.BootID }

// CSIEndpoint returns the path of the CSI socket.
func (p *NodePlugin) CSIEndpoint() string { return filepath.Join(p.opts.SocketDir, CSISocketName) }

// RegistrationEndpoint returns the path of the registration socket.
func (p *NodePlugin) RegistrationEndpoint() string {
	return filepath.Join(p.opts.RegistryDir, RegistrationSocketName)
}

// Registered is closed once the kubelet reported a successful registration.
func (p *NodePlugin) Registered() <-chan struct{} { return p.registered }

// Start listens on both sockets and serves them until Stop or until ctx is
// done. The CSI socket listens first, because the kubelet calls NodeGetInfo
// on it as soon as it has read the registration socket.
func (p *NodePlugin) Start(ctx context.Context) error {
	for _, dir := range []string{p.opts.SocketDir, p.opts.VolumesDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	svc := &service{p: p}
	csiSrv := grpc.NewServer()
	csipb.RegisterIdentityServer(csiSrv, svc)
	csipb.RegisterNodeServer(csiSrv, svc)
	regSrv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(regSrv, svc)

	for _, e := range []struct {
		srv  *grpc.Server
		path string
	}{{csiSrv, p.CSIEndpoint()}, {regSrv, p.RegistrationEndpoint()}} {
		// A socket left by a previous life of the machine would make
		// Listen fail with EADDRINUSE.
		if err := os.Remove(e.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			p.Stop()
			return err
		}
		l, err := net.Listen("unix", e.path)
		if err != nil {
			p.Stop()
			return err
		}
		p.servers = append(p.servers, e.srv)
		p.sockets = append(p.sockets, e.path)
		go e.srv.Serve(l)
	}
	p.log.Info("csi node plugin serving", "csi", p.CSIEndpoint(), "registration", p.RegistrationEndpoint())
	context.AfterFunc(ctx, p.Stop)
	return nil
}

// Stop stops serving, stops all writers and removes the sockets; removing
// the registration socket makes the kubelet unregister the driver.
func (p *NodePlugin) Stop() {
	p.stopOnce.Do(func() {
		for _, s := range p.servers {
			s.Stop()
		}
		for _, path := range p.sockets {
			os.Remove(path)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.stopped = true
		for target, w := range p.writers {
			w.close()
			delete(p.writers, target)
		}
	})
}

// service implements the gRPC services; its methods are not part of the
// package API.
type service struct {
	p *NodePlugin
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	registerapi.UnimplementedRegistrationServer
}

func (s *service) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              DriverName,
		Endpoint:          s.p.CSIEndpoint(),
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (s *service) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.PluginRegistered {
		s.p.log.Info("registered with kubelet")
		s.p.regOnce.Do(func() { close(s.p.registered) })
	} else {
		s.p.log.Error("kubelet refused registration", "err", st.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (s *service) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: DriverName, VendorVersion: "test"}, nil
}

// GetPluginCapabilities reports no controller service: the Attacher does
// the controller's part through the API.
func (s *service) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil
}

func (s *service) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

func (s *service) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: s.p.opts.NodeName}, nil
}

// NodeGetCapabilities advertises STAGE_UNSTAGE_VOLUME so that the kubelet
// goes through staging as with a real block-device driver.
func (s *service) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{{
		Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{
			Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		}},
	}}}, nil
}

// NodeStageVolume creates the staging directory and, with Options.Mount,
// mounts the volume's tmpfs there.
func (s *service) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	if req.VolumeId == "" || req.StagingTargetPath == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	if err := os.MkdirAll(req.StagingTargetPath, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if s.p.opts.Mount {
		mounted, err := mountTmpfs(TmpfsSource(req.VolumeId), req.StagingTargetPath)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if mounted {
			s.p.log.Info("volume staged: tmpfs mounted", "volume", req.VolumeId, "staging", req.StagingTargetPath)
		}
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume unmounts the staging path (with Options.Mount).
func (s *service) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	if req.VolumeId == "" || req.StagingTargetPath == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	if s.p.opts.Mount {
		unmounted, err := unmount(req.StagingTargetPath)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if unmounted {
			s.p.log.Info("volume unstaged: tmpfs unmounted", "volume", req.VolumeId, "staging", req.StagingTargetPath)
		}
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// TmpfsSource is the source name of a volume's tmpfs in mountinfo.
func TmpfsSource(volumeID string) string { return "fenced-test-" + volumeID }

// NodePublishVolume creates the target directory, bind-mounts the staging
// path onto it with Options.Mount (otherwise nothing is mounted: the hollow
// kubelet's FakeMounter never looks inside) and starts the writer.
func (s *service) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	p := s.p
	if req.VolumeId == "" || req.TargetPath == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	if strings.ContainsAny(req.VolumeId, `/\`) || req.VolumeId == "." || req.VolumeId == ".." {
		return nil, status.Errorf(codes.InvalidArgument, "volume_id %q is not a file name", req.VolumeId)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil, status.Error(codes.Unavailable, "plugin stopped")
	}
	if w, ok := p.writers[req.TargetPath]; ok {
		if w.volumeID != req.VolumeId {
			return nil, status.Errorf(codes.AlreadyExists, "%s is published with volume %s", req.TargetPath, w.volumeID)
		}
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(req.TargetPath, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if p.opts.Mount {
		if req.StagingTargetPath == "" {
			return nil, status.Error(codes.FailedPrecondition, "staging_target_path is required: the volume must be staged first")
		}
		if staged, err := isMountPoint(req.StagingTargetPath); err != nil || !staged {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s (%v)", req.VolumeId, req.StagingTargetPath, err)
		}
		if _, err := bindMount(req.StagingTargetPath, req.TargetPath); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	pod, uid := podOf(req.VolumeContext, req.TargetPath)
	rec := Record{Pod: pod, Node: p.opts.NodeName, Boot: p.opts.BootID, UID: uid}
	w, err := startWriter(filepath.Join(p.opts.VolumesDir, req.VolumeId), req.VolumeId, rec, p.opts.WriteInterval, p.log)
	if err != nil {
		if p.opts.Mount {
			_, _ = unmount(req.TargetPath)
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	p.writers[req.TargetPath] = w
	p.log.Info("volume published, writer started", "volume", req.VolumeId, "pod", pod, "target", req.TargetPath)
	return &csipb.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume stops the writer, unmounts the target (with
// Options.Mount; not lazily, so a busy mount fails the call) and removes
// the target directory, as the CSI spec asks of the plugin. Unknown targets
// are fine: the call must be idempotent.
func (s *service) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	p := s.p
	if req.VolumeId == "" || req.TargetPath == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	if hold := p.opts.HoldMountsFile; hold != "" {
		if _, err := os.Stat(hold); err == nil {
			p.log.Warn("volume unpublish refused: mounts held (test fault)", "volume", req.VolumeId, "target", req.TargetPath, "holdFile", hold)
			return nil, status.Errorf(codes.Internal, "unmount %s: target is busy: held open (test fault: %s exists)", req.TargetPath, hold)
		}
	}
	p.mu.Lock()
	w, ok := p.writers[req.TargetPath]
	delete(p.writers, req.TargetPath)
	p.mu.Unlock()
	if ok {
		w.close()
		p.log.Info("volume unpublished, writer stopped", "volume", req.VolumeId, "target", req.TargetPath)
	}
	if p.opts.Mount {
		// RemoveAll below must never reach into a volume still mounted.
		unmounted, err := unmount(req.TargetPath)
		if err != nil {
			p.log.Warn("volume unpublish failed", "volume", req.VolumeId, "target", req.TargetPath, "err", err)
			return nil, status.Error(codes.Internal, err.Error())
		}
		if unmounted {
			p.log.Info("volume unpublished: target unmounted", "volume", req.VolumeId, "target", req.TargetPath)
		}
	}
	if err := os.RemoveAll(req.TargetPath); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// podOf names the pod that publishes a volume: "namespace/name" from the
// pod information the kubelet adds when podInfoOnMount is set, else the pod
// UID from the target path, <root>/pods/<uid>/volumes/....
func podOf(volumeContext map[string]string, targetPath string) (pod, uid string) {
	uid = volumeContext[podUIDKey]
	if uid == "" {
		parts := strings.Split(filepath.ToSlash(targetPath), "/")
		if i := slices.Index(parts, "pods"); i >= 0 && i+2 < len(parts) && parts[i+2] == "volumes" {
			uid = parts[i+1]
		}
	}
	if ns, name := volumeContext[podNamespaceKey], volumeContext[podNameKey]; ns != "" && name != "" {
		return ns + "/" + name, uid
	}
	return uid, uid
}
