// Package ipmisim runs OpenIPMI's ipmi_sim as a real BMC for tests.
//
// Each Sim is one BMC with a LAN channel on a loopback (or test-namespace)
// address. Its startcmd is "the machine": chassis power is on exactly while
// that process lives. Power off kills it, power on starts it again, and a
// machine process that dies by itself reads as off — so a test can pull the
// plug (kill -9) and the BMC tells the truth, as a real one would.
package ipmisim

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/ports"
)

// Options configures one simulated BMC. Zero values get test-friendly defaults.
type Options struct {
	// Name of the BMC (default "bmc").
	Name string
	// Addr is the IP address the LAN channel listens on (default 127.0.0.1).
	Addr string
	// Port is the UDP port (default: a free port).
	Port int
	// Username and Password of the admin user (defaults "admin" and a random password).
	Username, Password string
	// SystemUUID is the machine's UUID as Linux (and the kubelet) report it;
	// the BMC's System GUID is encoded from it the way SMBIOS does.
	// Default: a random UUID.
	SystemUUID string
	// StartCmd is the machine: a shell command whose process is "power on".
	// Default: a sleeper. The machine must not daemonize.
	StartCmd string
	// StartOff leaves the machine powered off at start.
	StartOff bool
	// Dir holds the configuration, state and logs (default: t.TempDir()).
	Dir string
}

// Sim is a running ipmi_sim.
type Sim struct {
	Name       string
	Addr       string
	Port       int
	Username   string
	Password   string
	SystemUUID string
	Dir        string

	cmd     *exec.Cmd
	pidFile string
	// ctlPassword is the password of a second admin account that the test
	// itself uses (IPMITool): failed logins of the account under test fill
	// that account's session slots, as on real BMCs, and must not lock the
	// test out of its own cross-checks.
	ctlPassword string
}

// ctlUser is the test's own BMC account.
const ctlUser = "harness"

// Start launches ipmi_sim and waits until it answers an authenticated
// request. The simulator and its machine are stopped at test cleanup.
func Start(t testing.TB, opts Options) *Sim {
	t.Helper()
	s, err := start(t, opts)
	if err != nil {
		t.Fatalf("ipmisim: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func start(t testing.TB, o Options) (*Sim, error) {
	if _, err := exec.LookPath("ipmi_sim"); err != nil {
		return nil, errors.New("ipmi_sim not found: install Debian's openipmi package (hack/install-deps.sh does)")
	}
	s := &Sim{
		Name:       withDefault(o.Name, "bmc"),
		Addr:       withDefault(o.Addr, "127.0.0.1"),
		Port:       o.Port,
		Username:   withDefault(o.Username, "admin"),
		Password:   o.Password,
		SystemUUID: o.SystemUUID,
		Dir:        o.Dir,
	}
	if s.Dir == "" {
		s.Dir = t.TempDir()
	} else if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, err
	}
	if s.Password == "" {
		s.Password = "pw-" + randomHex(6)
	}
	s.ctlPassword = "ctl-" + randomHex(6)
	if s.SystemUUID == "" {
		s.SystemUUID = randomUUID()
	}
	guid, err := smbiosGUIDBytes(s.SystemUUID)
	if err != nil {
		return nil, err
	}
	if s.Port == 0 {
		if s.Port, err = FreePort("udp", s.Addr); err != nil {
			return nil, err
		}
	}
	// ipmi_sim only implements chassis control through its system
	// interface (channel 15): a VM serial channel that nothing connects to
	// makes power off send SIGTERM to the machine at once.
	serialPort, err := FreePort("tcp", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	s.pidFile = filepath.Join(s.Dir, "machine.pid")
	machine := filepath.Join(s.Dir, "machine.sh")
	startCmd := withDefault(o.StartCmd, "exec sleep 2147483647")
	script := fmt.Sprintf("#!/bin/sh\necho $$ > %s\n%s\n", s.pidFile, startCmd)
	if err := os.WriteFile(machine, []byte(script), 0o755); err != nil {
		return nil, err
	}
	startNow := "true"
	if o.StartOff {
		startNow = "false"
	}
	lan := fmt.Sprintf(`name "%s"
set_working_mc 0x20
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid %s
  endlan
  serial 15 127.0.0.1 %d codec VM
  poweroff_wait 0
  kill_wait 1
  startcmd "%s"
  startnow %s
  user 2 true "%s" "%s" admin 10 none md2 md5 straight
  user 3 true "%s" "%s" admin 10 none md2 md5 straight
`, s.Name, s.Addr, s.Port, hex.EncodeToString(guid), serialPort, machine, startNow, s.Username, s.Password, ctlUser, s.ctlPassword)
	emu := "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\nmc_enable 0x20\n"
	stateDir := filepath.Join(s.Dir, "state")
	for name, content := range map[string]string{"lan.conf": lan, "sim.emu": emu} {
		if err := os.WriteFile(filepath.Join(s.Dir, name), []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(s.Dir, "ipmi_sim.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	s.cmd = exec.Command("ipmi_sim", "-n", "-c", filepath.Join(s.Dir, "lan.conf"),
		"-f", filepath.Join(s.Dir, "sim.emu"), "-s", stateDir)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// Own process group so Stop takes the machine down with the BMC, and
	// SIGKILL if the test binary dies so nothing outlives the test.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting ipmi_sim: %w", err)
	}
	if err := s.waitReady(15 * time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls with ipmitool until the BMC accepts a session.
func (s *Sim) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if _, lastErr = s.ToolPowerState(); lastErr == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.Dir, "ipmi_sim.log"))
	return fmt.Errorf("ipmi_sim %s on %s:%d not ready after %s: %v\nipmi_sim log:\n%s",
		s.Name, s.Addr, s.Port, timeout, lastErr, log)
}

// Stop kills the simulator and its machine. It is safe to call twice.
func (s *Sim) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.Thaw()
	if pid, ok := s.MachinePID(); ok {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // machine's own group, if it made one
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Freeze stops the BMC process (SIGSTOP): it keeps its socket but answers
// nothing, like a hung BMC.
func (s *Sim) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen BMC.
func (s *Sim) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Sim) signal(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = syscall.Kill(s.cmd.Process.Pid, sig)
	}
}

// MachinePID returns the PID of the running machine process, and whether
// it is alive (not reaped and not a zombie).
func (s *Sim) MachinePID() (int, bool) {
	b, err := os.ReadFile(s.pidFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return pid, false
	}
	// The state is the field after the parenthesised command name.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return pid, len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// PowerLoss kills the machine with SIGKILL, as if its power cord was pulled.
// The BMC keeps running and will read "off".
func (s *Sim) PowerLoss() error {
	pid, ok := s.MachinePID()
	if !ok {
		return errors.New("machine is not running")
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// IPMITool runs ipmitool against this BMC (lanplus, cipher suite 3) as
// the test's own admin account, not the account under test.
func (s *Sim) IPMITool(args ...string) (string, error) {
	base := []string{"-I", "lanplus", "-H", s.Addr, "-p", strconv.Itoa(s.Port),
		"-U", ctlUser, "-E", "-C", "3", "-N", "1", "-R", "2"}
	cmd := exec.Command("ipmitool", append(base, args...)...)
	// -E reads the password from IPMI_PASSWORD so it is not in ps output.
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+s.ctlPassword)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ipmitool %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ToolPowerState reads the power state with ipmitool: "on" or "off".
func (s *Sim) ToolPowerState() (string, error) {
	out, err := s.IPMITool("chassis", "power", "status")
	if err != nil {
		return "", err
	}
	switch {
	case strings.Contains(out, "Chassis Power is on"):
		return "on", nil
	case strings.Contains(out, "Chassis Power is off"):
		return "off", nil
	}
	return "", fmt.Errorf("unexpected ipmitool output %q", out)
}

// FreePort returns a port that was free on addr for network "tcp" or
// "udp" (see package internal/testbed/ports).
func FreePort(network, addr string) (int, error) {
	p, err := ports.Free(network, addr, 1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// smbiosGUIDBytes encodes a UUID the way SMBIOS stores it (first three
// fields little-endian), which is what IPMI's Get System GUID returns.
func smbiosGUIDBytes(uuid string) ([]byte, error) {
	b, err := hex.DecodeString(strings.ReplaceAll(uuid, "-", ""))
	if err != nil || len(b) != 16 {
		return nil, fmt.Errorf("invalid UUID %q", uuid)
	}
	b[0], b[1], b[2], b[3] = b[3], b[2], b[1], b[0]
	b[4], b[5] = b[5], b[4]
	b[6], b[7] = b[7], b[6]
	return b, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func randomUUID() string {
	h := randomHex(16)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func withDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
