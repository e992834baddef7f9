// Command fenced-machine is the startcmd of a simulated BMC: it boots one
// test machine (see package machine) and runs until powered off.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"fenced.io/fenced/internal/testbed/machine"
)

func main() {
	var o machine.Options
	var extra string
	flag.StringVar(&o.Name, "name", "", "node name")
	flag.StringVar(&o.Dir, "dir", "", "machine state directory")
	flag.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of the hollow kubelet")
	flag.StringVar(&o.HollowKubelet, "hollow-kubelet", "", "path of the hollow kubelet binary")
	flag.StringVar(&o.SystemUUID, "system-uuid", "", "SMBIOS UUID the node reports")
	flag.StringVar(&o.VolumesDir, "volumes-dir", "", "shared directory standing for the volumes' disks")
	flag.DurationVar(&o.Shutdown.GracePeriod, "shutdown-grace-period", 0, "the kubelet's shutdownGracePeriod (0: graceful node shutdown off)")
	flag.DurationVar(&o.Shutdown.CriticalPodsGracePeriod, "shutdown-grace-period-critical-pods", 0, "the kubelet's shutdownGracePeriodCriticalPods")
	flag.DurationVar(&o.Shutdown.InhibitDelayMax, "inhibit-delay-max", 0, "logind's InhibitDelayMaxSec (0: logind's default)")
	flag.DurationVar(&o.BootDelay, "boot-delay", 0, "time from power on to starting the kubelet (firmware and OS boot)")
	flag.StringVar(&extra, "extra", "", `JSON list of further argv lists to start at boot, e.g. [["fenced","agent"]]`)
	flag.Parse()
	if o.Name == "" || o.Dir == "" || o.Kubeconfig == "" || o.HollowKubelet == "" || o.VolumesDir == "" {
		fmt.Fprintln(os.Stderr, "fenced-machine: --name, --dir, --kubeconfig, --hollow-kubelet and --volumes-dir are required")
		os.Exit(2)
	}
	if extra != "" {
		if err := json.Unmarshal([]byte(extra), &o.Extra); err != nil {
			fmt.Fprintln(os.Stderr, "fenced-machine: --extra:", err)
			os.Exit(2)
		}
	}
	// The BMC (ipmi_sim) is our parent: if the test kills it, the machine
	// must not outlive it as an orphan.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil || os.Getppid() == 1 {
		fmt.Fprintln(os.Stderr, "fenced-machine: parent gone or prctl failed:", err)
		os.Exit(1)
	}
	// Lead a process group: the harness signals the group to cut power
	// (SIGKILL) or hang the machine (SIGSTOP).
	if err := syscall.Setpgid(0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "fenced-machine: setpgid:", err)
		os.Exit(1)
	}
	// Pdeathsig fires when the thread that started a child exits; keep the
	// children's parent thread alive for the life of the process.
	runtime.LockOSThread()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := machine.Run(ctx, o, log); err != nil {
		log.Error("machine failed", "err", err)
		os.Exit(1)
	}
}
