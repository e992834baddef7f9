package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"fenced.io/fenced/internal/testbed/machine"
)

// The machine's fenced agent as a process of its own: killed alone (a
// crash), restarted in place (systemd's Restart=), frozen alone (a stalled
// agent on a healthy host). The agent is always the machine's extra
// process 0 (see prepareFencing), so its log is extra-0-fenced.log, which
// every start appends to.

// agentIndex is the agent's place in the machine's extra processes.
const agentIndex = 0

// AgentPID returns the PID of the machine's running fenced agent: the
// `fenced agent --node-name=<machine>` process in the machine's process
// group (so not another harness's machine of the same name).
func (m *Machine) AgentPID() (int, error) {
	pgid, err := m.pgid()
	if err != nil {
		return 0, err
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	marker := "--node-name=" + m.Name + "\x00"
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		// A zombie's cmdline is empty: only live agents match.
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "fenced\x00agent\x00") || !strings.Contains(string(cmdline), marker) {
			continue
		}
		if _, group, err := procStat(pid); err == nil && group == pgid {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no fenced agent running on %s", m.Name)
}

// KillAgent kills the machine's fenced agent (SIGKILL) and nothing else:
// the kubelet keeps running, like a crashed DaemonSet pod. The agent stays
// down until RestartAgent or the machine's next boot.
func (m *Machine) KillAgent() error {
	pid, err := m.AgentPID()
	if err != nil {
		return err
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// RestartAgent restarts the machine's fenced agent in place, as systemd's
// Restart= does after a crash: the agent is killed (SIGKILL; if it is down
// already, after KillAgent, it is only started) and the machine's launcher
// starts it again with the same argv and environment — the same boot ID,
// since the host did not reboot — appending to the same log (AgentLog). It
// returns once the new agent process runs, without waiting for it to be up:
// its "agent started" line in AgentLog says that. The kubelet and everything
// else on the machine keep running. The launcher does the restart, so on a
// hung machine (Hang) nothing happens until Resume, and RestartAgent gives
// up after 30 s. See machine.RestartRequestFile for the launcher's side.
func (m *Machine) RestartAgent() error { return m.restartAgent(syscall.SIGKILL) }

// StopAndRestartAgent restarts the machine's fenced agent as a DaemonSet
// rollout or `systemctl restart fenced` does: SIGTERM, so that the agent
// leaves the ring in good order, then the launcher starts it again (as
// RestartAgent, whose notes apply).
func (m *Machine) StopAndRestartAgent() error { return m.restartAgent(syscall.SIGTERM) }

// restartAgent is RestartAgent with the agent stopped by stop: SIGKILL for
// a crash, SIGTERM for a stop as the kubelet or systemd does it.
func (m *Machine) restartAgent(stop syscall.Signal) error {
	launcher, err := m.pgid() // the launcher leads the machine's group
	if err != nil {
		return err
	}
	old, err := m.AgentPID()
	running := err == nil
	request := machine.RestartRequestFile(m.Dir, agentIndex)
	if err := os.WriteFile(request, nil, 0o644); err != nil {
		return fmt.Errorf("asking %s's launcher for a restart: %w", m.Name, err)
	}
	if running {
		// The launcher restarts it when it reaps it.
		if err := syscall.Kill(old, stop); err != nil && !errors.Is(err, syscall.ESRCH) {
			_ = os.Remove(request)
			return err
		}
	} else if err := syscall.Kill(launcher, syscall.SIGUSR1); err != nil {
		// Nothing to reap: wake the launcher to look at the request.
		_ = os.Remove(request)
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pid, err := m.AgentPID()
		if err == nil && pid != old {
			return nil
		}
		if time.Now().After(deadline) {
			_ = os.Remove(request)
			return fmt.Errorf("%s: no new fenced agent 30 s after the restart request (was pid %d); see %s and %s",
				m.Name, old, filepath.Join(m.Dir, "machine.log"), filepath.Join(m.Dir, "extra-0-fenced.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreezeAgent stops the machine's fenced agent alone (SIGSTOP) — the host,
// its kubelet and its network carry on — and returns once the kernel shows
// it stopped (state T), so a test knows the agent takes no further step.
// ThawAgent undoes it. Hang freezes the whole machine instead.
func (m *Machine) FreezeAgent() error { return m.signalAgent(syscall.SIGSTOP, true) }

// ThawAgent resumes a frozen agent (SIGCONT) and returns once it is no
// longer stopped.
func (m *Machine) ThawAgent() error { return m.signalAgent(syscall.SIGCONT, false) }

func (m *Machine) signalAgent(sig syscall.Signal, stopped bool) error {
	pid, err := m.AgentPID()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, _, err := procStat(pid)
		if err != nil {
			return fmt.Errorf("%s's agent (pid %d) after %v: %w", m.Name, pid, sig, err)
		}
		if (state == 'T') == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's agent (pid %d) is in state %c 10 s after %v", m.Name, pid, state, sig)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procStat returns a process's state letter (R, S, D, T, Z, ...) and
// process group from /proc/<pid>/stat.
func procStat(pid int) (state byte, pgrp int, err error) {
	return statFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
}

// statFile reads the state letter and process group from a stat file of
// /proc (a process's, or one of its threads' under task/).
func statFile(path string) (state byte, pgrp int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("cannot parse %s: %q", path, s)
	}
	pgrp, err = strconv.Atoi(f[2])
	return f[0][0], pgrp, err
}
