package pdusim

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/ports"
)

// SysObjectID is what the simulated PDU answers for sysObjectID.0: APC's
// "rPDU" (Switched Rack PDU), which fence_apc_snmp maps to the
// rPDUOutletControl/StatusTable objects that apcpass serves.
const SysObjectID = ".1.3.6.1.4.1.318.1.3.4.5"

// OIDs of one outlet's objects, with the outlet number appended.
const (
	// OIDOutletState is rPDUOutletStatusOutletState: 1 on, 2 off.
	OIDOutletState = ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4"
	// OIDOutletName is rPDUOutletStatusOutletName.
	OIDOutletName = ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.2"
	// OIDOutletCommand is rPDUOutletControlOutletCommand: write 1 for on,
	// 2 for off.
	OIDOutletCommand = ".1.3.6.1.4.1.318.1.1.12.3.3.1.1.4"
	// oidSysObjectID is SNMPv2-MIB::sysObjectID.0.
	oidSysObjectID = ".1.3.6.1.2.1.1.2.0"
)

// Options configures one simulated PDU. Zero values get test-friendly
// defaults.
type Options struct {
	// Name of the PDU (sysName; default "pdu").
	Name string
	// Outlets is the number of outlets (default 8).
	Outlets int
	// Names are the outlets' names, outlet 1 first (default "outlet-N").
	Names []string
	// Off lists the outlets (1-based) that start off; all others start on.
	Off []int
	// Addr is the IP address snmpd listens on (default 127.0.0.1). It may be
	// an address of a network namespace the test created, in 198.18.0.0/15.
	Addr string
	// Port is the UDP port (default: a free one, internal/testbed/ports).
	Port int
	// Community is the SNMP v1/v2c read-write community (default: random).
	// Any other community gets no answer at all, as on a real agent.
	Community string
	// V3User, V3AuthPassword and V3PrivPassword create an SNMPv3 user with
	// SHA authentication and AES privacy (authPriv) when V3User is set; the
	// passwords default to random ones (net-snmp needs at least 8 chars).
	V3User, V3AuthPassword, V3PrivPassword string
	// Dir holds the configuration, the outlet state and the logs (default
	// t.TempDir()).
	Dir string
}

// PDU is a running snmpd that serves a switched rack PDU's outlets.
type PDU struct {
	Name           string
	Host           string
	Port           int
	Community      string
	V3User         string
	V3AuthPassword string
	V3PrivPassword string
	Dir            string
	// StatePath is the outlet table shared with snmpd's handler (state.go).
	StatePath string

	t   testing.TB
	cmd *exec.Cmd

	// pollMu serializes change detection and the callbacks it runs.
	pollMu    sync.Mutex
	last      []OutletState
	callbacks []func(outlet int, on bool)

	stopOnce sync.Once
	stop     chan struct{}
	watchers sync.WaitGroup
}

// watchInterval is how often the state file is checked for changes made
// over SNMP. SetOutlet reports its own changes at once.
const watchInterval = 10 * time.Millisecond

// Start launches snmpd with the APC handler and waits until it answers an
// SNMP GET. It is stopped at test cleanup.
func Start(t testing.TB, opts Options) *PDU {
	t.Helper()
	p, err := start(t, opts)
	if err != nil {
		t.Fatalf("pdusim: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

func start(t testing.TB, o Options) (*PDU, error) {
	for _, tool := range []string{"snmpd", "snmpget"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not found: install Debian's snmpd and snmp packages (hack/install-deps.sh does)", tool)
		}
	}
	p := &PDU{
		Name:      withDefault(o.Name, "pdu"),
		Host:      withDefault(o.Addr, "127.0.0.1"),
		Port:      o.Port,
		Community: withDefault(o.Community, "c-"+randomHex(6)),
		V3User:    o.V3User,
		Dir:       o.Dir,
		t:         t,
		stop:      make(chan struct{}),
	}
	if p.V3User != "" {
		p.V3AuthPassword = withDefault(o.V3AuthPassword, "auth-"+randomHex(6))
		p.V3PrivPassword = withDefault(o.V3PrivPassword, "priv-"+randomHex(6))
	}
	if p.Dir == "" {
		p.Dir = t.TempDir()
	} else if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return nil, err
	}
	n := o.Outlets
	if n <= 0 {
		n = 8
	}
	if len(o.Names) > n {
		return nil, fmt.Errorf("%d names for %d outlets", len(o.Names), n)
	}
	outlets := make([]OutletState, n)
	for i := range outlets {
		outlets[i] = OutletState{Name: fmt.Sprintf("outlet-%d", i+1), On: true}
		if i < len(o.Names) {
			if strings.ContainsAny(o.Names[i], "\n\r") || o.Names[i] == "" {
				return nil, fmt.Errorf("outlet %d: name %q is empty or has a line break", i+1, o.Names[i])
			}
			outlets[i].Name = o.Names[i]
		}
	}
	for _, i := range o.Off {
		if i < 1 || i > n {
			return nil, fmt.Errorf("outlet %d out of range 1-%d", i, n)
		}
		outlets[i-1].On = false
	}
	p.StatePath = filepath.Join(p.Dir, "outlets")
	if err := writeState(p.StatePath, outlets); err != nil {
		return nil, err
	}
	p.last = outlets

	handler := filepath.Join(p.Dir, "apcpass")
	if b, err := exec.Command("go", "build", "-o", handler, "fenced.io/fenced/internal/testbed/pdusim/apcpass").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the pass_persist handler: %v\n%s", err, b)
	}
	if p.Port == 0 {
		ps, err := ports.Free("udp", p.Host, 1)
		if err != nil {
			return nil, err
		}
		p.Port = ps[0]
	}
	conf := fmt.Sprintf(`# snmpd.conf of the simulated PDU %[1]s (internal/testbed/pdusim)
agentaddress udp:%[2]s
sysName %[1]s
sysDescr APC Switched Rack PDU (fenced test bed, net-snmp with pass_persist)
sysObjectID %[3]s
rwcommunity %[4]s default
pass_persist .1.3.6.1.4.1.318.1.1.12.3 %[5]s %[6]s
`, p.Name, p.Addr(), SysObjectID, p.Community, handler, p.StatePath)
	if p.V3User != "" {
		conf += fmt.Sprintf("createUser %s SHA %q AES %q\nrwuser %s priv\n",
			p.V3User, p.V3AuthPassword, p.V3PrivPassword, p.V3User)
	}
	confPath := filepath.Join(p.Dir, "snmpd.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	persist := filepath.Join(p.Dir, "persist")
	if err := os.MkdirAll(persist, 0o700); err != nil {
		return nil, err
	}
	// -f: foreground; -C: no configuration but ours; -Lf: log to a file.
	p.cmd = exec.Command("snmpd", "-f", "-C", "-c", confPath, "-Lf", filepath.Join(p.Dir, "snmpd.log"))
	// SNMP_PERSISTENT_DIR keeps the v3 engine ID and users out of
	// /var/lib/snmp; MIBS= stops snmpd from loading (and warning about)
	// MIB files it does not need.
	p.cmd.Env = append(os.Environ(), "SNMP_PERSISTENT_DIR="+persist, "MIBS=")
	// Own process group so Stop takes the handler down with snmpd, and
	// SIGKILL if the test binary dies so nothing outlives the test.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting snmpd: %w", err)
	}
	if err := p.waitReady(15 * time.Second); err != nil {
		p.Stop()
		return nil, err
	}
	p.watchers.Add(1)
	go p.watch()
	return p, nil
}

// waitReady polls with snmpget until the agent answers sysObjectID.
func (p *PDU) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		var got string
		if got, lastErr = p.SNMPGet(oidSysObjectID); lastErr == nil {
			if got != SysObjectID {
				return fmt.Errorf("snmpd answers sysObjectID %q, want %s", got, SysObjectID)
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(p.Dir, "snmpd.log"))
	return fmt.Errorf("snmpd %s on %s not ready after %s: %v\nsnmpd log:\n%s", p.Name, p.Addr(), timeout, lastErr, log)
}

// Addr returns the agent's UDP address, host:port.
func (p *PDU) Addr() string { return net.JoinHostPort(p.Host, strconv.Itoa(p.Port)) }

// Outlets returns the number of outlets.
func (p *PDU) Outlets() int { return len(p.read()) }

// Outlet reports whether outlet i (1-based, as the PDU numbers them) is on.
func (p *PDU) Outlet(i int) bool {
	outlets := p.read()
	if i < 1 || i > len(outlets) {
		p.t.Errorf("pdusim %s: outlet %d out of range 1-%d", p.Name, i, len(outlets))
		return false
	}
	return outlets[i-1].On
}

// OutletName returns the name of outlet i (1-based).
func (p *PDU) OutletName(i int) string {
	outlets := p.read()
	if i < 1 || i > len(outlets) {
		p.t.Errorf("pdusim %s: outlet %d out of range 1-%d", p.Name, i, len(outlets))
		return ""
	}
	return outlets[i-1].Name
}

func (p *PDU) read() []OutletState {
	outlets, err := ReadState(p.StatePath)
	if err != nil {
		p.t.Errorf("pdusim %s: %v", p.Name, err)
	}
	return outlets
}

// SetOutlet switches outlet i (1-based) on or off by hand, as someone at
// the PDU's front panel would. OnChange callbacks for it have run when it
// returns.
func (p *PDU) SetOutlet(i int, on bool) {
	err := UpdateState(p.StatePath, func(outlets []OutletState) error {
		if i < 1 || i > len(outlets) {
			return fmt.Errorf("outlet %d out of range 1-%d", i, len(outlets))
		}
		outlets[i-1].On = on
		return nil
	})
	if err != nil {
		p.t.Errorf("pdusim %s: %v", p.Name, err)
		return
	}
	p.poll()
}

// OnChange registers fn to be called with every change of an outlet's
// state, whether made over SNMP (noticed within watchInterval) or by
// SetOutlet. Callbacks run one at a time, in the order of the changes, and
// must not call SetOutlet (it waits for them).
func (p *PDU) OnChange(fn func(outlet int, on bool)) {
	p.pollMu.Lock()
	defer p.pollMu.Unlock()
	p.callbacks = append(p.callbacks, fn)
}

func (p *PDU) watch() {
	defer p.watchers.Done()
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
			p.poll()
		}
	}
}

// poll compares the state file with the last state seen and reports the
// differences to the callbacks.
func (p *PDU) poll() {
	p.pollMu.Lock()
	defer p.pollMu.Unlock()
	outlets, err := ReadState(p.StatePath)
	if err != nil {
		return // the file is only ever replaced whole; a failed read is transient (Stop removed the dir)
	}
	for i, o := range outlets {
		if i < len(p.last) && p.last[i].On == o.On {
			continue
		}
		for _, fn := range p.callbacks {
			fn(i+1, o.On)
		}
	}
	p.last = outlets
}

// SNMPGet reads one object with net-snmp's snmpget (v2c, the PDU's
// community) and returns its value as snmpget prints it (-Oqv).
func (p *PDU) SNMPGet(oid string) (string, error) {
	out, err := exec.Command("snmpget", "-v2c", "-c", p.Community, "-t", "0.5", "-r", "1",
		"-m", "", "-Oqvn", "-Ln", p.Addr(), oid).CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		return text, fmt.Errorf("snmpget %s: %v: %s", oid, err, text)
	}
	return text, nil
}

// Freeze stops snmpd and its handler (SIGSTOP of their process group):
// the PDU answers nothing over SNMP, as one whose management network is
// down. Its outlets keep their state, SetOutlet still switches them and
// OnChange still reports it: the watcher reads the state file, not snmpd.
// Thaw undoes it.
func (p *PDU) Freeze() error { return p.signal(syscall.SIGSTOP) }

// Thaw lets a frozen PDU answer again (SIGCONT).
func (p *PDU) Thaw() error { return p.signal(syscall.SIGCONT) }

func (p *PDU) signal(sig syscall.Signal) error {
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("pdusim %s: not running", p.Name)
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Stop kills snmpd and its handler. It is safe to call twice.
func (p *PDU) Stop() {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.watchers.Wait()
		if p.cmd != nil && p.cmd.Process != nil {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			_ = p.cmd.Wait()
		}
	})
}

// Log returns snmpd's log, for test failure messages.
func (p *PDU) Log() string {
	b, err := os.ReadFile(filepath.Join(p.Dir, "snmpd.log"))
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func withDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
