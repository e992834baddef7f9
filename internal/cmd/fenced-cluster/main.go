// Command fenced-cluster brings the local test cluster up for a person to
// use with kubectl, and tears it down on SIGINT/SIGTERM (make cluster-down).
//
//	fenced-cluster -state /tmp/fenced-cluster -machines node-a,node-b,node-c
//
// It writes <state>/kubeconfig, <state>/machines (name, address, BMC port,
// BMC password file) and <state>/ready once everything is up.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/harness"
)

func main() {
	state := flag.String("state", filepath.Join(os.TempDir(), "fenced-cluster"), "directory for kubeconfig, machine list and pid")
	machines := flag.String("machines", "node-a,node-b,node-c", "comma-separated machine names")
	flag.Parse()
	if err := os.MkdirAll(*state, 0o755); err != nil {
		log.Fatal(err)
	}
	_ = os.Remove(filepath.Join(*state, "ready"))

	// This program stops the cluster itself on SIGINT/SIGTERM, in order:
	// machines, network, control plane.
	cluster.HandleSignals = false
	failed := harness.RunStandalone(func(tb *harness.Standalone) {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		h := harness.Start(ctx, tb, harness.Options{Machines: strings.Split(*machines, ",")})
		write(*state, "kubeconfig", mustRead(h.Cluster.Kubeconfig))
		var b strings.Builder
		fmt.Fprintf(&b, "%-8s %-14s %-20s %s\n", "NAME", "ADDRESS", "BMC", "BMC-PASSWORD-FILE")
		for _, m := range h.Machines {
			pw := filepath.Join(*state, m.Name+".bmc-password")
			write(*state, m.Name+".bmc-password", m.BMC.Password+"\n")
			fmt.Fprintf(&b, "%-8s %-14s %-20s %s\n", m.Name, m.Host.Addr, fmt.Sprintf("%s:%d", m.BMC.Addr, m.BMC.Port), pw)
		}
		write(*state, "machines", b.String())
		write(*state, "ready", "")
		fmt.Printf("cluster ready (Kubernetes %s)\n\n  export KUBECONFIG=%s/kubeconfig\n  kubectl get nodes -o wide\n\n%s\n"+
			"BMCs: ipmitool -I lanplus -C 3 -H ADDRESS -p PORT -U admin -f PASSWORD-FILE chassis power status\n"+
			"Stop with SIGINT/SIGTERM (make cluster-down).\n", h.Cluster.Version, *state, b.String())
		<-ctx.Done()
		fmt.Println("tearing down")
	})
	_ = os.Remove(filepath.Join(*state, "ready"))
	if failed {
		os.Exit(1)
	}
}

func write(dir, name, content string) {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		log.Fatal(err)
	}
}

func mustRead(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	return string(b)
}
