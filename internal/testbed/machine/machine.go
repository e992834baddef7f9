// Package machine is the "computer" behind a simulated BMC: a process group
// that ipmi_sim starts on power on and kills on power off.
//
// One boot of a machine runs a stand-in for systemd-logind on a D-Bus
// system bus of its own (package logind), a hollow kubelet (real kubelet
// code, fake container runtime; see internal/testbed/hollow-kubelet), the test CSI node
// plugin (whose writers append to the shared volume files while pods use
// them) and any extra processes (the fenced agent). Every boot gets a new
// boot ID. The launcher leads its own process group, so the harness can
// SIGKILL the group (power loss) or SIGSTOP it (a hung node); its children
// also die with it through Pdeathsig, as if the power went.
//
// A clean shutdown goes through logind, as `systemctl poweroff` does:
// PowerOff on the machine's bus (BusAddress) makes logind announce
// PrepareForShutdown, wait for the delay inhibitor locks (the kubelet's
// graceful node shutdown, the fenced agent), and then the machine switches
// itself off: every process dies and the launcher exits, so the BMC reads
// off.
//
// `ip netns exec` gives every boot a mount namespace of its own, so the
// CSI plugin's mounts are real there and vanish with the boot.
package machine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"fenced.io/fenced/internal/testbed/csi"
	"fenced.io/fenced/internal/testbed/logind"
	"fenced.io/fenced/internal/testbed/poll"
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
	// (internal/testbed/hollow-kubelet, built by hack/kube-binaries.sh).
	HollowKubelet string
	// SystemUUID is the machine's SMBIOS UUID (the one its BMC reports).
	SystemUUID string
	// VolumesDir is the shared directory whose files stand for volumes.
	VolumesDir string
	// Extra are further processes started at boot (argv); they get
	// FENCED_BOOT_ID, FENCED_NODE_NAME and DBUS_SYSTEM_BUS_ADDRESS in
	// their environment. One that exits stays down, unless a restart was
	// asked for (see RestartRequestFile).
	Extra [][]string
	// Shutdown configures graceful node shutdown.
	Shutdown Shutdown
	// BootDelay passes between power on and the start of the machine's
	// processes, as firmware and OS boot do.
	BootDelay time.Duration
}

// Shutdown configures a machine's graceful node shutdown: the kubelet's
// KubeletConfiguration fields and logind's inhibit delay.
type Shutdown struct {
	// GracePeriod is the kubelet's shutdownGracePeriod; 0 leaves graceful
	// node shutdown off (the kubelet takes no inhibitor lock).
	GracePeriod time.Duration
	// CriticalPodsGracePeriod is shutdownGracePeriodCriticalPods, the part
	// of GracePeriod reserved for critical pods.
	CriticalPodsGracePeriod time.Duration
	// InhibitDelayMax is logind's InhibitDelayMaxSec: how long a shutdown
	// waits for delay locks (default logind.DefaultInhibitDelayMax). The
	// kubelet wants it at least GracePeriod, or it tries to raise it by
	// writing /etc/systemd/logind.conf.d.
	InhibitDelayMax time.Duration
}

// BootIDFile is the file in Options.Dir that holds the current boot ID.
const BootIDFile = "boot_id"

// BootFile is the file in Options.Dir that names the current boot's
// launcher and boot ID: "<pid> <boot ID>". A machine switched on again runs
// its new launcher a moment before that launcher has written its boot ID;
// a reader that finds another pid in it than the running launcher's knows
// the file is still the previous boot's.
const BootFile = "boot"

// KubeletRootDir is the kubelet's --root-dir on the machine whose
// Options.Dir is dir. CSI volumes are mounted below it, in the machine's
// mount namespace.
func KubeletRootDir(dir string) string { return filepath.Join(dir, "tmp", "kubelet") }

// BusAddress is the D-Bus system bus address (for DBUS_SYSTEM_BUS_ADDRESS)
// of the machine whose Options.Dir is dir; its logind serves there. The
// socket is a file, so it is reachable from outside the machine's network
// namespace too.
func BusAddress(dir string) string { return logind.Address(busDir(dir)) }

func busDir(dir string) string { return filepath.Join(dir, "tmp", "dbus") }

// HoldMountsFile is the fault switch of the machine whose Options.Dir is
// dir: while it exists, the CSI plugin fails NodeUnpublishVolume as a busy
// unmount does (see csi.Options.HoldMountsFile). It is outside tmp/, so it
// survives reboots.
func HoldMountsFile(dir string) string { return filepath.Join(dir, "hold-mounts") }

// RestartRequestFile is the file that asks the launcher of the machine
// whose Options.Dir is dir to restart extra process i (Options.Extra[i]) in
// place, as systemd's Restart= does for a crashed service: same argv, same
// environment (so the same boot ID: the host did not reboot), the same log
// appended to. The launcher looks at the file when the process exits, and on
// SIGUSR1 for a process that is not running; either way it removes the file
// and starts the process once. So, to restart a running process: create the
// file, then kill the process; to start one that died earlier: create the
// file, then send SIGUSR1 to the launcher. Without the file an extra process
// that exits stays down. The file is in tmp/, so a request that was never
// served does not outlive the boot.
func RestartRequestFile(dir string, i int) string {
	return filepath.Join(dir, "tmp", fmt.Sprintf("restart-extra-%d", i))
}

// Run boots the machine and runs until ctx ends (the launcher maps SIGTERM
// to that) or until its logind has completed a clean shutdown; then it kills
// every process of the boot at once, as a power cut would, and returns.
//
// Run must be called on a goroutine locked to its OS thread
// (runtime.LockOSThread) that lives as long as the launcher: it starts every
// child, restarts included, from that thread, whose exit would fire the
// children's Pdeathsig.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	// First: SIGUSR1's default action would kill the launcher.
	wake := make(chan os.Signal, 1)
	signal.Notify(wake, syscall.SIGUSR1)
	defer signal.Stop(wake)
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
	if err := writeFileAtomic(filepath.Join(o.Dir, BootFile), fmt.Sprintf("%d %s\n", os.Getpid(), bootID)); err != nil {
		return err
	}
	log.Info("booting")
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(o.BootDelay):
	}

	// logind's OnPowerOff ends the boot, as the power going off does.
	ctx, powerOff := context.WithCancel(ctx)
	defer powerOff()
	cleanShutdown := make(chan struct{})
	ld, err := logind.Start(ctx, logind.Options{
		Dir:             busDir(o.Dir),
		InhibitDelayMax: o.Shutdown.InhibitDelayMax,
		OnPowerOff: func() {
			close(cleanShutdown)
			powerOff()
		},
		Logger: log,
	})
	if err != nil {
		return fmt.Errorf("starting logind: %w", err)
	}
	defer ld.Stop()
	env := []string{"FENCED_BOOT_ID=" + bootID, "FENCED_NODE_NAME=" + o.Name, "DBUS_SYSTEM_BUS_ADDRESS=" + ld.Address()}

	var procs []*child // every process started in this boot, restarts included
	exits := make(chan *child, len(o.Extra)+1)
	quit := make(chan struct{}) // no one reads exits any more
	defer func() {
		close(quit)
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
		}
		for _, p := range procs {
			<-p.done
		}
	}()
	rootDir := KubeletRootDir(o.Dir)
	kubeletArgv := []string{o.HollowKubelet,
		"--name=" + o.Name,
		"--kubeconfig=" + o.Kubeconfig,
		"--root-dir=" + rootDir,
		"--boot-id=" + bootID,
		"--system-uuid=" + o.SystemUUID,
		"--v=2",
	}
	if o.Shutdown.GracePeriod > 0 {
		kubeletArgv = append(kubeletArgv,
			"--shutdown-grace-period="+o.Shutdown.GracePeriod.String(),
			"--shutdown-grace-period-critical-pods="+o.Shutdown.CriticalPodsGracePeriod.String())
	}
	kubelet, err := startChild(o, bootID, "kubelet", kubeletArgv, env, false, exits, quit)
	if err != nil {
		return err
	}
	procs = append(procs, kubelet)
	extras := make([]*child, len(o.Extra)) // the current process of each
	for i, argv := range o.Extra {
		p, err := startChild(o, bootID, fmt.Sprintf("extra-%d-%s", i, filepath.Base(argv[0])), argv, env, false, exits, quit)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		extras[i] = p
	}
	// restart serves a restart request for extra process i, if there is
	// one; the caller knows the process is not running.
	restart := func(i int) {
		if err := os.Remove(RestartRequestFile(o.Dir, i)); err != nil {
			return // no request (or it was served already)
		}
		old := extras[i]
		p, err := startChild(o, bootID, old.name, old.argv, env, true, exits, quit)
		if err != nil {
			log.Error("restart of an extra process failed", "process", old.name, "err", err)
			return
		}
		log.Info("extra process restarted", "process", p.name, "pid", p.cmd.Process.Pid)
		procs = append(procs, p)
		extras[i] = p
	}

	// Real mounts only where they cannot leak: in the mount namespace that
	// `ip netns exec` made for this boot.
	mount, err := csi.PrivateMountNamespace()
	if err != nil {
		log.Warn("cannot tell the mount namespace; CSI mounts stay simulated", "err", err)
	} else if !mount {
		log.Warn("running in the host's mount namespace; CSI mounts stay simulated")
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
		Mount:       mount,
		// Outside tmp/: a test holds the mounts across reboots.
		HoldMountsFile: HoldMountsFile(o.Dir),
	})
	if err := plugin.Start(ctx); err != nil {
		return fmt.Errorf("starting the CSI node plugin: %w", err)
	}
	defer plugin.Stop()
	log.Info("booted", "pluginRegistry", registry, "bus", ld.Address(), "csiMounts", mount)

	// Up: watch the processes (an exit is logged, and an extra process
	// with a restart request starts again) until the power goes.
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case p := <-exits:
			log.Info("process exited", "process", p.name, "pid", p.cmd.Process.Pid, "status", p.err)
			for i := range extras {
				if extras[i] == p {
					restart(i)
				}
			}
		case <-wake:
			for i, p := range extras {
				if p.exited() {
					restart(i)
				}
			}
		}
	}
	select {
	case <-cleanShutdown:
		log.Info("shutdown complete: powering off, killing every process of this boot")
	default:
		log.Info("power off: killing every process of this boot")
	}
	return nil
}

// waitForDir waits until dir exists: the kubelet creates its plugin
// registry at start, and the CSI plugin registers by placing a socket there.
func waitForDir(ctx context.Context, dir string, timeout time.Duration) error {
	err := poll.UntilContext(ctx, 100*time.Millisecond, timeout, func(context.Context) bool {
		fi, err := os.Stat(dir)
		return err == nil && fi.IsDir()
	})
	if errors.Is(err, poll.ErrTimeout) {
		return fmt.Errorf("%s did not appear within %s", dir, timeout)
	}
	return err
}

// child is one process of a boot.
type child struct {
	name string
	argv []string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // how it ended; valid once done is closed
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// startChild starts argv as a child that dies with the launcher, logging
// to Dir/<name>.log (appended across boots and restarts, with a marker for
// each), with env added to the launcher's environment. Once the process is
// reaped it is sent on exits, unless quit is closed.
func startChild(o Options, bootID, name string, argv, env []string, restart bool, exits chan<- *child, quit <-chan struct{}) (*child, error) {
	logFile, err := os.OpenFile(filepath.Join(o.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	what := "boot"
	if restart {
		what = "restart in boot"
	}
	fmt.Fprintf(logFile, "==== %s %s at %s: %s\n", what, bootID, time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	// No Setpgid: children stay in the launcher's group, so a signal to the
	// group reaches the whole machine. Pdeathsig covers the launcher dying
	// alone (SIGKILL from the BMC).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, argv: argv, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
		select {
		case exits <- c:
		case <-quit:
		}
	}()
	return c, nil
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
