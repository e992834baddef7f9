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
	"sync"
	"syscall"
	"testing"

	"fenced.io/fenced/test/cluster"
	"fenced.io/fenced/test/harness"
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
	tb := &runTB{}
	code := 0
	func() {
		defer tb.cleanup()
		defer func() {
			if r := recover(); r != nil && r != errFatal {
				panic(r)
			} else if r != nil {
				code = 1
			}
		}()
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
			"BMCs: ipmitool -I lanplus -C 3 -H 127.0.0.1 -p PORT -U admin -f PASSWORD-FILE chassis power status\n"+
			"Stop with SIGINT/SIGTERM (make cluster-down).\n", h.Cluster.Version, *state, b.String())
		<-ctx.Done()
		fmt.Println("tearing down")
	}()
	_ = os.Remove(filepath.Join(*state, "ready"))
	os.Exit(code)
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

var errFatal = fmt.Errorf("fatal")

// runTB is the part of testing.TB the harness uses, for running it outside
// `go test`. The embedded nil interface is never called.
type runTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

func (r *runTB) Helper() {}
func (r *runTB) Logf(format string, args ...any) {
	log.Printf(format, args...)
}
func (r *runTB) Fatal(args ...any) { r.fail(fmt.Sprint(args...)) }
func (r *runTB) Fatalf(format string, args ...any) {
	r.fail(fmt.Sprintf(format, args...))
}
func (r *runTB) fail(msg string) {
	log.Print("FATAL: ", msg)
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
	panic(errFatal)
}
func (r *runTB) Failed() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }
func (r *runTB) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}
func (r *runTB) TempDir() string {
	d, err := os.MkdirTemp("", "fenced-cluster-")
	if err != nil {
		r.Fatal(err)
	}
	r.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}
func (r *runTB) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	harness.Cleanup()
}
