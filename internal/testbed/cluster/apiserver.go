package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// An API server outage, as scenarios need it ("the control plane is down:
// does fenced keep its hands off?"): StopAPIServer ends kube-apiserver and
// StartAPIServer brings the same one back. Everything else keeps running —
// etcd with all the objects, the controller manager and the scheduler, which
// retry on their own, and whatever a test started against Host (kubelets,
// fenced agents), which finds the port refusing connections meanwhile.

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after
// Options.StopGrace) and waits until its process group is gone. From then on
// every client of Host — the admin Client, kubelets, fenced agents, the
// controller manager and the scheduler — gets "connection refused" until
// StartAPIServer. etcd keeps running, so no object is lost. Stopping an API
// server that is already down, or a cluster that was stopped, does nothing.
//
// kube-apiserver closes its port within milliseconds of the SIGTERM, but
// while the controller manager holds watches on it, it seldom exits before
// the SIGKILL: expect StopAPIServer to take StopGrace (5 s by default).
//
// The server's log (LogPath(APIServer)) gets a "### stopped" line and is
// appended to, never truncated, by the next start.
func (c *Cluster) StopAPIServer() {
	c.apiMu.Lock()
	defer c.apiMu.Unlock()
	c.mu.Lock()
	api, down, stopped := c.api, c.apiDown, c.stopped
	if api == nil || down || stopped {
		c.mu.Unlock()
		return
	}
	c.apiDown = true
	c.mu.Unlock()
	began := time.Now()
	api.stop(c.opts.StopGrace)
	c.opts.Logf("%s stopped in %.1fs (%s is down)", APIServer, time.Since(began).Seconds(), c.Host)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, exactly as
// Start did: the same binary and flags, so the same address and port, etcd,
// certificate directory (kube-apiserver reuses the serving certificate it
// generated there, so CAFile and every kubeconfig written so far stay
// valid) and token file. It waits until /readyz answers ok and the admin
// client works again, within Options.ReadyTimeout.
//
// The port is the one the stopped server had; should another program have
// taken it meanwhile, the server exits with "address already in use" and
// the error quotes its log. A stopped cluster cannot be restarted; an API
// server that is running already is left alone (nil error).
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.apiMu.Lock()
	defer c.apiMu.Unlock()
	began := time.Now()
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return errors.New("cluster: StartAPIServer after Stop")
	}
	if c.api == nil || !c.apiDown {
		c.mu.Unlock()
		return nil
	}
	// Under c.mu, so that a concurrent Stop either sees the new process in
	// procs (and stops it) or has set stopped before we got here.
	api, err := startProcess(APIServer, c.LogPath(APIServer), c.apiPath, c.apiArgs, childEnv())
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.replaceLocked(c.api, api)
	c.api, c.apiDown = api, false
	c.mu.Unlock()

	if err := c.waitReady(ctx, api, c.Host+"/readyz", c.token); err != nil {
		return err
	}
	// The serving certificate must be the one every kubeconfig trusts.
	if ca, err := os.ReadFile(c.CAFile); err != nil || !bytes.Equal(ca, c.caPEM) {
		return fmt.Errorf("%s came back with another serving certificate in %s (read error: %v): the kubeconfigs written so far no longer verify it", APIServer, c.CAFile, err)
	}
	if _, err := c.client.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("%s is ready again but the admin client cannot use it: %w (log: %s)", APIServer, err, api.logPath)
	}
	c.opts.Logf("%s started again in %.1fs (%s)", APIServer, time.Since(began).Seconds(), c.Host)
	return nil
}

// APIServerDown reports whether StopAPIServer stopped kube-apiserver and
// StartAPIServer has not started it again. It says nothing about the health
// of a running server.
func (c *Cluster) APIServerDown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apiDown
}
