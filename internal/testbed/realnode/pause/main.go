// Command pause is the sandbox ("pause") container of the real node's
// pods: it holds the pod's namespaces and does nothing else until it is
// told to stop. The harness has no registry to pull registry.k8s.io/pause
// from, so it builds this instead and imports it into containerd
// (internal/testbed/realnode).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of its pod, reap nothing: children exit unwaited-for are
	// reaped by the kernel when SIGCHLD is ignored.
	signal.Ignore(syscall.SIGCHLD)
	<-stop
}
