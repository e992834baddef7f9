package cluster

import (
	"fmt"
	"syscall"
)

// FreezeControllerManager stops kube-controller-manager with SIGSTOP: its
// controllers and its informers stand still, as in a long pause of the
// process (CPU starvation, a stopped VM), while the API server goes on.
// ThawControllerManager lets it go on from where it stopped.
func (c *Cluster) FreezeControllerManager() error {
	return c.signal(ControllerManager, syscall.SIGSTOP)
}

// ThawControllerManager undoes FreezeControllerManager (SIGCONT).
func (c *Cluster) ThawControllerManager() error { return c.signal(ControllerManager, syscall.SIGCONT) }

// signal sends sig to the process group of the running component name.
func (c *Cluster) signal(name string, sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name != name {
			continue
		}
		if done, _ := p.exited(); done {
			continue
		}
		return syscall.Kill(-p.pgid, sig)
	}
	return fmt.Errorf("%s is not running", name)
}
