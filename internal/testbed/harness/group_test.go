package harness

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/poll"
)

// TestGroupStates follows a process group as Hang and a power loss see
// it: running, stopped (every thread), dead.
func TestGroupStates(t *testing.T) {
	// A shell with a child of its own: two processes, one group.
	cmd := exec.Command("sh", "-c", "sleep 600 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(t, cmd.Start())
	pgid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL); _ = cmd.Wait() })

	poll.Until(t, time.Minute, "both processes of the group run", func() bool {
		n := 0
		_ = eachOfGroup(pgid, func(int, byte) { n++ })
		return n == 2
	})
	if running, err := groupRunning(pgid); err != nil || running == 0 || !groupAlive(pgid) || BootGone(pgid) {
		t.Fatalf("a live group: %d running threads (%v), alive %v, gone %v", running, err, groupAlive(pgid), BootGone(pgid))
	}
	must(t, syscall.Kill(-pgid, syscall.SIGSTOP))
	poll.Until(t, time.Minute, "every thread of the group stopped", func() bool {
		running, err := groupRunning(pgid)
		return err == nil && running == 0
	})
	if !groupAlive(pgid) || BootGone(pgid) {
		t.Fatal("a stopped group counts as dead")
	}
	must(t, syscall.Kill(-pgid, syscall.SIGCONT))
	poll.Until(t, time.Minute, "the group runs again", func() bool {
		running, err := groupRunning(pgid)
		return err == nil && running > 0
	})
	must(t, syscall.Kill(-pgid, syscall.SIGKILL))
	// The shell is this test's child: a zombie until reaped, which counts
	// as dead.
	poll.Until(t, time.Minute, "the group is gone", func() bool { return BootGone(pgid) })
}
