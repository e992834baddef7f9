// Package machine is the "computer" behind a simulated BMC: a process group
// that ipmi_sim starts on power on and kills on power off.
//
// One boot of a machine runs a hollow kubelet (real kubelet code, fake
// container runtime; see hack/hollow-kubelet), the test CSI node plugin (whose writers append
// to the shared volume files while pods use them) and any extra processes
// (later the fenced agent). Every boot gets a new boot ID. The launcher
// leads its own process group, so the harness can SIGKILL the group (power
// loss) or SIGSTOP it (a hung node); its children also die with it through
// Pdeathsig, as if the power went.
package machine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"fenced.io/fenced/test/csi"
)

// Options describe one machine. Paths are on the shared host file system.
type Options struct {
	// Name is the node name.
	Name string
	// Dir holds this machine's state across boots: boot_id, logs, kubelet
	// certificates. Its tmp/ is wiped at each boot, like a tmpfs.
	Dir string
	// Kubeconfig lets the hollow kubelet reach the API server.
	Kubeconfig string
	// HollowKubelet is the path of the hollow kubelet binary
	// (hack/hollow-kubelet, built by hack/kube-binaries.sh).
	HollowKubelet string
	// SystemUUID is the machine's SMBIOS UUID (the one its BMC reports).
	SystemUUID string
	// VolumesDir is the shared directory whose files stand for volumes.
	VolumesDir string
	// Extra are further processes started at boot (argv); they get
	// FENCED_BOOT_ID and FENCED_NODE_NAME in their environment.
	Extra [][]string
}

// BootIDFile is the file in Options.Dir that holds the current boot ID.
const BootIDFile = "boot_id"

// Run boots the machine and runs until ctx ends (the launcher maps SIGTERM
// to that); then it kills every process of the boot at once, as a power
// cut would, and returns.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	bootID := newBootID()
	log = log.With("machine", o.Name, "boot", bootID)
	tmp := filepath.Join(o.Dir, "tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(o.Dir, BootIDFile), bootID+"\n"); err != nil {
		return err
	}
	log.Info("booting")

	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
		}
		for _, p := range procs {
			_ = p.Wait()
		}
	}()
	rootDir := filepath.Join(tmp, "kubelet")
	kubelet, err := startProcess(o, bootID, "kubelet", []string{o.HollowKubelet,
		"--name=" + o.Name,
		"--kubeconfig=" + o.Kubeconfig,
		"--root-dir=" + rootDir,
		"--boot-id=" + bootID,
		"--system-uuid=" + o.SystemUUID,
		"--v=2",
	})
	if err != nil {
		return err
	}
	procs = append(procs, kubelet)
	for i, argv := range o.Extra {
		p, err := startProcess(o, bootID, fmt.Sprintf("extra-%d-%s", i, filepath.Base(argv[0])), argv)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}

	registry := filepath.Join(rootDir, "plugins_registry")
	if err := waitForDir(ctx, registry, 2*time.Minute); err != nil {
		return fmt.Errorf("waiting for the kubelet's plugin registry: %w", err)
	}
	plugin := csi.NewNodePlugin(csi.Options{
		NodeName:    o.Name,
		BootID:      bootID,
		SocketDir:   filepath.Join(tmp, "csi"),
		RegistryDir: registry,
		VolumesDir:  o.VolumesDir,
		Logger:      log,
	})
	if err := plugin.Start(ctx); err != nil {
		return fmt.Errorf("starting the CSI node plugin: %w", err)
	}
	defer plugin.Stop()
	log.Info("booted", "pluginRegistry", registry)

	<-ctx.Done()
	log.Info("power off: killing every process of this boot")
	return nil
}

// waitForDir waits until dir exists: the kubelet creates its plugin
// registry at start, and the CSI plugin registers by placing a socket there.
func waitForDir(ctx context.Context, dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s", dir, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startProcess starts argv as a child that dies with the launcher, logging
// to Dir/<name>.log (appended across boots, with a marker per boot).
func startProcess(o Options, bootID, name string, argv []string) (*exec.Cmd, error) {
	logFile, err := os.OpenFile(filepath.Join(o.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "==== boot %s at %s: %s\n", bootID, time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "FENCED_BOOT_ID="+bootID, "FENCED_NODE_NAME="+o.Name)
	// No Setpgid: children stay in the launcher's group, so a signal to the
	// group reaches the whole machine. Pdeathsig covers the launcher dying
	// alone (SIGKILL from the BMC).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return cmd, nil
}

func newBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func writeFileAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
