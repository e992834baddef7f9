package cluster

import "time"

// RestartBackoff is how long a control-plane component that exited waits
// before it is started again, as the kubelet waits before restarting a
// crashed static pod (its CrashLoopBackOff starts at 10 s).
var RestartBackoff = 10 * time.Second

// startRestarting is start, for a component restartWhenItExits keeps
// running.
func (c *Cluster) startRestarting(name, path string, args []string) (*process, error) {
	p, err := c.start(name, path, args)
	if err == nil {
		go c.restartWhenItExits(p, path, args)
	}
	return p, err
}

// restartWhenItExits starts component p (kube-controller-manager,
// kube-scheduler) again with the same command line whenever it exits
// before Stop, as the kubelet of a real control-plane node restarts its
// static pods: such a component exits on purpose when it cannot go on —
// kube-scheduler exits when it finds its cache corrupted, as it did after
// an API server restart (Kubernetes v1.37.2, "Pod updated on a different
// node than previously added to") — and relies on being restarted. Each
// restart is written to the component's log and to Options.Logf, and
// counted (Restarts). A component stopped with SIGSTOP
// (FreezeControllerManager) has not exited.
func (c *Cluster) restartWhenItExits(p *process, path string, args []string) {
	for {
		<-p.done
		c.mu.Lock()
		stopped := c.stopped
		c.mu.Unlock()
		if stopped {
			return
		}
		c.opts.Logf("%s exited (%v); starting it again in %s, as a kubelet restarts a static pod (log %s)", p.name, p.exitErr, RestartBackoff, p.logPath)
		time.Sleep(RestartBackoff)
		c.mu.Lock()
		if c.stopped {
			c.mu.Unlock()
			return
		}
		// Under c.mu, so that a concurrent Stop either sees the new
		// process in procs (and stops it) or has set stopped first.
		next, err := startProcess(p.name, p.logPath, path, args, childEnv())
		if err != nil {
			c.mu.Unlock()
			c.opts.Logf("%s: could not start it again: %v", p.name, err)
			return
		}
		c.replaceLocked(p, next)
		if c.restarts == nil {
			c.restarts = map[string]int{}
		}
		c.restarts[p.name]++
		c.mu.Unlock()
		p = next
	}
}

// Restarts returns how often component (ControllerManager, Scheduler) was
// started again after it exited.
func (c *Cluster) Restarts(component string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restarts[component]
}

// replaceLocked puts next in old's place in procs, keeping the start order
// Stop relies on. c.mu must be held.
func (c *Cluster) replaceLocked(old, next *process) {
	for i, q := range c.procs {
		if q == old {
			c.procs[i] = next
		}
	}
}
