//go:build ignore

// Command hollow-kubelet is kubemark's hollow kubelet (real kubelet code,
// fake container runtime, fake cAdvisor) with five changes the fenced test
// harness needs. hack/kube-binaries.sh builds it inside the throwaway module
// that requires k8s.io/kubernetes; it is not part of fenced's own module.
// Each kubelet API whose signature changed between Kubernetes releases
// lives in CONCERN_v1.MINOR.go, one file per release that changed it
// (machineinfo, probes, runtime): the script builds main.go with the
// newest of each not newer than the release it builds.
//
//  1. Controller-managed attach/detach is on (kubemark hard-codes it off, and
//     a kubelet that attaches CSI volumes itself is refused since v1.34):
//     the attach/detach controller, VolumeAttachments and the
//     out-of-service taint's force detach all work as on a real node.
//  2. The node reports a boot ID and a system UUID (the fake cAdvisor
//     reports empty ones), so fencing can tell a rebooted node from one that
//     was never off and check the BMC's identity.
//  3. The root directory and the fake runtime's socket live under --root-dir
//     instead of fresh /tmp directories, one per machine boot.
//  4. Graceful node shutdown can be switched on (--shutdown-grace-period,
//     --shutdown-grace-period-critical-pods): the kubelet's real node
//     shutdown manager then takes a logind delay inhibitor lock on the system
//     bus named by DBUS_SYSTEM_BUS_ADDRESS (internal/testbed/logind on a test machine)
//     and, on PrepareForShutdown, kills the pods and waits for their volumes
//     to be unmounted before it releases the lock.
//  5. Readiness is honest: kubemark's fake probe manager reports every
//     container Ready, also one still waiting for its volumes
//     (ContainerCreating), so a Deployment's RollingUpdate took a pod stuck
//     on a Multi-Attach error for Available and deleted the old pod. Here a
//     container is Ready and Started while it runs, as the real probe
//     manager says of a container without probes.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	probetest "k8s.io/kubernetes/pkg/kubelet/prober/testing"
	"k8s.io/kubernetes/pkg/kubemark"
)

// machineInfo adds the machine's identity to the fake cAdvisor; its
// MachineInfo method, whose signature changed, is in machineinfo_v1.*.go.
type machineInfo struct {
	cadvisortest.Fake
	bootID, systemUUID string
}

// honestProbes is kubemark's fake probe manager, but a container is Ready
// (and Started) only while it runs: what the real probe manager reports for
// a container without probes, which is all a hollow node runs. Its
// UpdatePodStatus, whose signature changed, is in probes_v1.*.go and calls
// honest.
type honestProbes struct{ probetest.FakeManager }

// honest marks each container of status Ready and Started exactly while it
// runs.
func honest(status *v1.PodStatus) {
	for i := range status.ContainerStatuses {
		c := &status.ContainerStatuses[i]
		running := c.State.Running != nil
		c.Ready, c.Started = running, &running
	}
}

// runtimeTimeout is how long the kubelet waits for the fake runtime's
// socket, as kubemark's hollow node does.
const runtimeTimeout = 15 * time.Second

func main() {
	klog.InitFlags(nil)
	name := flag.String("name", "", "node name")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig with the node's credentials")
	rootDir := flag.String("root-dir", "", "kubelet root directory (plugins_registry lives here)")
	port := flag.Int("kubelet-port", 10250, "kubelet server port")
	bootID := flag.String("boot-id", "", "boot ID to report in status.nodeInfo.bootID")
	systemUUID := flag.String("system-uuid", "", "system UUID to report in status.nodeInfo.systemUUID")
	shutdownGrace := flag.Duration("shutdown-grace-period", 0, "KubeletConfiguration shutdownGracePeriod (0: graceful node shutdown off)")
	shutdownGraceCritical := flag.Duration("shutdown-grace-period-critical-pods", 0, "KubeletConfiguration shutdownGracePeriodCriticalPods (part of --shutdown-grace-period)")
	flag.Parse()
	if *name == "" || *kubeconfig == "" || *rootDir == "" {
		klog.Fatal("--name, --kubeconfig and --root-dir are required")
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatal(err)
	}
	cfg.UserAgent = "hollow-kubelet"
	client := clientset.NewForConfigOrDie(cfg)

	f, c := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{NodeName: *name, KubeletPort: *port, MaxPods: 110})
	_ = os.RemoveAll(f.RootDirectory) // the /tmp dir kubemark made; ours is --root-dir
	f.RootDirectory = *rootDir
	c.StaticPodPath = filepath.Join(*rootDir, "static-pods")
	c.PodLogsDir = filepath.Join(*rootDir, "pod-logs")
	for _, d := range []string{c.StaticPodPath, c.PodLogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			klog.Fatal(err)
		}
	}
	c.EnableControllerAttachDetach = true
	// The kubelet would silently run without a shutdown manager when the
	// critical pods' share exceeds the whole period.
	if *shutdownGraceCritical > *shutdownGrace {
		klog.Fatal("--shutdown-grace-period-critical-pods must not exceed --shutdown-grace-period")
	}
	c.ShutdownGracePeriod = metav1.Duration{Duration: *shutdownGrace}
	c.ShutdownGracePeriodCriticalPods = metav1.Duration{Duration: *shutdownGraceCritical}
	klog.Infof("Using %s as root dir for hollow-kubelet", *rootDir)

	// As kubemark does: heartbeats time out no later than the lease.
	hb := *cfg
	hb.Timeout = c.NodeStatusUpdateFrequency.Duration
	if lease := time.Duration(c.NodeLeaseDurationSeconds) * time.Second; hb.Timeout > lease {
		hb.Timeout = lease
	}
	hb.QPS = -1
	heartbeat := clientset.NewForConfigOrDie(&hb)

	endpoint := "unix://" + filepath.Join(*rootDir, "runtime.sock")
	rt := fakeremote.NewFakeRemoteRuntime()
	if err := rt.Start(endpoint); err != nil {
		klog.Fatal(err)
	}
	defer rt.Stop()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rs, err := newRuntimeService(klog.NewContext(ctx, klog.Background()), endpoint)
	if err != nil {
		klog.Fatal(err)
	}
	cadvisor := &machineInfo{Fake: cadvisortest.Fake{NodeName: *name}, bootID: *bootID, systemUUID: *systemUUID}
	hk := kubemark.NewHollowKubelet(f, c, client, heartbeat, cadvisor, rt.ImageService, rs, cm.NewStubContainerManager())
	hk.KubeletDeps.ProbeManager = honestProbes{}
	hk.Run(ctx)
}
