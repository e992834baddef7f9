// Package harness assembles the local test cluster: a real control plane
// (package cluster) on a bridge of its own, and machines — each a network
// namespace with a hollow kubelet, the test CSI node plugin and its volume
// writers — behind OpenIPMI ipmi_sim BMCs whose power is the machine's
// process group. Scenarios use it to pull plugs, hang nodes and cut
// networks, and then look at what Kubernetes (and later fenced) did.
//
// With Options.Feeds the machines are also fed by switched rack PDUs
// (package pdusim, switched by tests or by fence_apc_snmp over SNMP): a
// machine whose outlets are all off dies and its BMC goes dark with it;
// when a feed comes back the BMC answers first, and the machine is switched
// on again if it was on when the power went ("restore last state"). See
// pdu.go for the whole physics.
package harness

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/csi"
	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/internal/testbed/machine"
	"fenced.io/fenced/internal/testbed/netns"
	"fenced.io/fenced/internal/testbed/wdemu"
)

// Options configure Start.
type Options struct {
	// Machines are the node names to create (default: node-a, node-b).
	Machines []string
	// Subnet is the bridge's /24 in 198.18.0.0/15 (default: a free one
	// chosen at random, so concurrent test binaries do not collide).
	Subnet string
	// Cluster configures the control plane; BindAddress is set by Start.
	Cluster cluster.Options
	// Extra returns further processes each machine starts at boot.
	Extra func(m *Machine) [][]string
	// Fencing, if set, runs fenced agents on every machine.
	Fencing *Fencing
	// Shutdown is every machine's graceful node shutdown configuration
	// (nil: DefaultShutdown; &machine.Shutdown{} turns it off).
	Shutdown *machine.Shutdown
	// Feeds puts the machines behind switched rack PDUs: 0, none (the
	// machines' power is only their BMCs'); 1, PDU "pdu-a", machine i on
	// its outlet i+1; 2, also "pdu-b", machine i on outlet i+1 of each
	// (dual power supplies). See PDUs, Machine.Outlets, Machine.CutFeeds.
	Feeds int
}

// DefaultShutdown is how every machine is set up unless Options.Shutdown
// says otherwise, as a bare-metal node with graceful node shutdown is: the
// kubelet gets 15 s (10 s for ordinary pods, then 5 s for critical ones)
// and logind waits up to 30 s for its delay locks. The 15 s beyond the
// kubelet's period are the fenced agent's to wait for the last volume
// unmounts; 30 s also keeps the kubelet from trying to raise logind's
// limit, which it only does when the limit is below its grace period.
var DefaultShutdown = machine.Shutdown{
	GracePeriod:             15 * time.Second,
	CriticalPodsGracePeriod: 5 * time.Second,
	InhibitDelayMax:         30 * time.Second,
}

// BootDelay is how long a machine takes from power on to starting its
// kubelet: firmware and OS boot. Real servers take minutes; without any
// delay a machine switched on again after a fence is Ready within 0.3 s,
// before the scheduler has placed the fenced node's replacement pods.
const BootDelay = 3 * time.Second

// Harness is a running test cluster.
type Harness struct {
	Cluster    *cluster.Cluster
	Net        *netns.Network
	Machines   []*Machine
	VolumesDir string
	Attacher   *csi.Attacher
	Dir        string

	pdus []*PDU
	t    testing.TB
	// fencerConfigVolume: Fencing.ConfigVolume.
	fencerConfigVolume bool
	// watchdogMu serializes the machines' watchdog resets and their end
	// at cleanup (watchdog.go).
	watchdogMu      sync.Mutex
	watchdogsClosed bool
}

// Machine is one simulated computer and its BMC.
type Machine struct {
	Name string
	Host *netns.Host
	BMC  *ipmisim.Sim
	Dir  string
	// SystemUUID is what the machine's kubelet reports.
	SystemUUID string
	// Fencer: the machine's agent holds the BMC inventory.
	Fencer bool

	bmcUUID, bmcAddr, bmcPassword string
	bmcPort                       int

	// feeds are the machine's outlets (Options.Feeds); feedMu serializes
	// its power changes and guards the fields below (pdu.go).
	feeds  []feed
	feedMu sync.Mutex
	// unpowered: every outlet is off. onAtLoss: the machine was on when
	// its power went.
	unpowered, onAtLoss bool
	// powerErr is what went wrong in the physics since the last
	// CutFeeds/RestoreFeeds.
	powerErr error

	// watchdog is the machine's emulated watchdog (Fencing.Watchdog), nil
	// without one; watchdog.go.
	watchdog       *wdemu.Watchdog
	watchdogHold   atomic.Bool
	watchdogResets atomic.Int32
}

// TestTimeout bounds the context StartForTest returns: generous, for a
// whole scenario test on a loaded machine (a few minutes warm) plus, on a
// fresh machine, building the Kubernetes binaries first (~6 min).
const TestTimeout = 30 * time.Minute

// SkipShortMessage is why an end-to-end test skips under -short.
const SkipShortMessage = "end-to-end: starts a control plane and machines; skipped with -short"

// StartForTest is the preamble of every end-to-end test: it skips t under
// -short (SkipShortMessage) and runs Start under a context with a
// TestTimeout deadline, cancelled by t.Cleanup once everything Start set up
// is torn down. The context is returned for the test's own calls; being
// cancelled at cleanup, not when the test function returns, it serves
// parallel subtests too.
func StartForTest(t testing.TB, o Options) (context.Context, *Harness) {
	t.Helper()
	if testing.Short() {
		t.Skip(SkipShortMessage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), TestTimeout)
	t.Cleanup(cancel)
	return ctx, Start(ctx, t, o)
}

// Start brings up the control plane, the network, the CSI attacher and the
// machines, and waits until every machine's Node is Ready. Everything is
// torn down at test cleanup, also when the test fails.
func Start(ctx context.Context, t testing.TB, o Options) *Harness {
	t.Helper()
	if len(o.Machines) == 0 {
		o.Machines = []string{"node-a", "node-b"}
	}
	if o.Subnet == "" {
		var err error
		if o.Subnet, err = netns.FreeSubnet(); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	start := time.Now()
	// A short root: unix sockets (the CSI plugin's, the kubelet's) live
	// below it and their paths must fit in 108 bytes, which t.TempDir's
	// test-name paths do not.
	dir, err := os.MkdirTemp("", "fh-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	h := &Harness{t: t, Dir: dir}
	h.VolumesDir = filepath.Join(h.Dir, "volumes")
	if err := os.MkdirAll(h.VolumesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if h.Net, err = netns.New(o.Subnet); err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() { _ = h.Net.Close() })
	// On Ctrl-C the control plane's handler kills the processes; the
	// namespaces and the bridge would outlive the test binary.
	t.Cleanup(cluster.OnInterrupt(func() {
		for _, m := range h.Machines {
			m.BMC.Stop()
		}
		_ = h.Net.Close()
	}))

	copts := o.Cluster
	copts.BindAddress = h.Net.Gateway.String()
	h.Cluster = cluster.MustStart(ctx, t, copts)
	t.Logf("harness: control plane %s ready after %s", h.Cluster.Version, time.Since(start).Round(time.Millisecond))

	client := h.Cluster.Client()
	if err := csi.EnsureCSIDriver(ctx, client); err != nil {
		t.Fatalf("harness: %v", err)
	}
	attacherLog, err := os.Create(filepath.Join(h.Dir, "attacher.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { attacherLog.Close() })
	h.Attacher = csi.NewAttacher(client, slog.New(slog.NewTextHandler(attacherLog, nil)))
	attachCtx, stopAttacher := context.WithCancel(context.Background())
	t.Cleanup(stopAttacher)
	go h.Attacher.Run(attachCtx)

	launcher, err := buildOnce("fenced.io/fenced/internal/testbed/machine/fenced-machine")
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	for _, name := range o.Machines {
		m, err := h.planMachine(name, o.Fencing)
		if err != nil {
			t.Fatalf("harness: machine %s: %v", name, err)
		}
		h.Machines = append(h.Machines, m)
	}
	// Before the fencing configurations: they may name the PDUs.
	if err := h.startPDUs(o.Feeds); err != nil {
		t.Fatalf("harness: %v", err)
	}
	extra := o.Extra
	if o.Fencing != nil {
		if extra, err = h.prepareFencing(ctx, o.Fencing, extra); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	shutdown := DefaultShutdown
	if o.Shutdown != nil {
		shutdown = *o.Shutdown
	}
	for _, m := range h.Machines {
		if err := h.powerOnFirstTime(m, launcher, extra, shutdown); err != nil {
			t.Fatalf("harness: machine %s: %v", m.Name, err)
		}
	}
	h.wirePDUs()
	t.Cleanup(func() {
		if t.Failed() {
			h.dumpMachineLogs()
		}
		// No outlet change or watchdog reset may reach a machine being
		// torn down.
		h.stopPDUs()
		h.closeWatchdogs()
		// Machines go first: their processes keep the namespaces busy.
		for _, m := range h.Machines {
			m.BMC.Stop()
		}
	})
	for _, m := range h.Machines {
		if err := h.WaitNodeReady(ctx, m.Name, 3*time.Minute); err != nil {
			t.Fatalf("harness: %v", err)
		}
		if m.Fencer {
			if err := h.markControlPlane(ctx, m.Name); err != nil {
				t.Fatalf("harness: %v", err)
			}
		}
	}
	if o.Fencing != nil {
		if err := h.WaitRingConverged(ctx, 2*time.Minute); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	t.Logf("harness: %d machines Ready after %s", len(h.Machines), time.Since(start).Round(time.Millisecond))
	return h
}

// planMachine creates the machine's namespace and picks its identity and
// BMC endpoint; nothing runs yet.
func (h *Harness) planMachine(name string, f *Fencing) (*Machine, error) {
	host, err := h.Net.AddHost(name)
	if err != nil {
		return nil, err
	}
	m := &Machine{Name: name, Host: host, Dir: filepath.Join(h.Dir, name),
		// Its BMC reports this UUID as System GUID and its kubelet as
		// status.nodeInfo.systemUUID, as on real hardware.
		SystemUUID: uuid.NewString()}
	m.bmcUUID = m.SystemUUID
	if f != nil {
		m.Fencer = slices.Contains(f.Fencers, name)
		if slices.Contains(f.BMCIdentityMismatch, name) {
			m.bmcUUID = uuid.NewString()
		}
	}
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return nil, err
	}
	// BMCs listen on the bridge's gateway: the management side, which
	// fencers in other namespaces reach and partitions of this machine
	// do not cut (they blackhole routes inside this machine's namespace).
	m.bmcAddr = h.Net.Gateway.String()
	if m.bmcPort, err = ipmisim.FreePort("udp", m.bmcAddr); err != nil {
		return nil, err
	}
	m.bmcPassword = "pw-" + uuid.NewString()[:8]
	return m, nil
}

// powerOnFirstTime starts the machine's BMC, which boots the machine.
func (h *Harness) powerOnFirstTime(m *Machine, launcher string, extra func(*Machine) [][]string, shutdown machine.Shutdown) error {
	kubeconfig, err := h.Cluster.UserKubeconfig("system:node:"+m.Name, "system:nodes")
	if err != nil {
		return err
	}
	argv := m.Host.Wrap(launcher,
		"--name="+m.Name,
		"--dir="+m.Dir,
		"--kubeconfig="+kubeconfig,
		"--hollow-kubelet="+h.Cluster.HollowKubelet,
		"--system-uuid="+m.SystemUUID,
		"--volumes-dir="+h.VolumesDir,
		"--shutdown-grace-period="+shutdown.GracePeriod.String(),
		"--shutdown-grace-period-critical-pods="+shutdown.CriticalPodsGracePeriod.String(),
		"--inhibit-delay-max="+shutdown.InhibitDelayMax.String(),
		"--boot-delay="+BootDelay.String())
	if extra != nil {
		if procs := extra(m); len(procs) > 0 {
			argv = append(argv, "--extra="+jsonArgv(procs))
		}
	}
	startCmd := "exec " + shellJoin(argv) + " >>" + shellQuote(filepath.Join(m.Dir, "machine.log")) + " 2>&1"
	m.BMC = ipmisim.Start(h.t, ipmisim.Options{Name: m.Name, Dir: filepath.Join(m.Dir, "bmc"), StartCmd: startCmd,
		SystemUUID: m.bmcUUID, Addr: m.bmcAddr, Port: m.bmcPort, Password: m.bmcPassword})
	return nil
}

// prepareFencing sets up RBAC and configurations and returns the extra
// processes with each machine's agent added.
func (h *Harness) prepareFencing(ctx context.Context, f *Fencing, extra func(*Machine) [][]string) (func(*Machine) [][]string, error) {
	binary := f.AgentBinary
	if binary == "" {
		var err error
		if binary, err = CurrentFenced(); err != nil {
			return nil, err
		}
	}
	if err := h.setupFencing(ctx, f); err != nil {
		return nil, err
	}
	observer, fencer, err := h.writeFencingConfigs(f)
	if err != nil {
		return nil, err
	}
	if f.Watchdog != nil {
		if err := h.startWatchdogs(f.Watchdog); err != nil {
			return nil, err
		}
	}
	return func(m *Machine) [][]string {
		var procs [][]string
		if extra != nil {
			procs = extra(m)
		}
		config := observer
		if m.Fencer {
			config = fencer
		}
		if f.perMachineConfigs() {
			config = h.MachineConfigFile(m)
		}
		argv, err := h.agentArgv(m, config, binary)
		if err != nil {
			h.t.Fatalf("harness: agent of %s: %v", m.Name, err)
		}
		// The agent is always extra process 0, so its log is extra-0-fenced.log.
		return append([][]string{argv}, procs...)
	}, nil
}

// BootID returns the machine's current boot ID ("" before its first boot).
func (m *Machine) BootID() string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, machine.BootIDFile))
	return strings.TrimSpace(string(b))
}

// RunningBoot returns the boot the machine runs now and its launcher's
// PID, read so that a boot just switched on is never mistaken for the one
// before it: known is false while the running launcher has not yet written
// its boot ID (ask again). A machine that is off runs no boot ("", 0, true).
func (m *Machine) RunningBoot() (boot string, pid int, known bool) {
	pid, alive := m.BMC.MachinePID()
	if !alive {
		return "", 0, true
	}
	b, err := os.ReadFile(filepath.Join(m.Dir, machine.BootFile))
	var wrote int
	if err == nil {
		_, err = fmt.Sscanf(string(b), "%d %s", &wrote, &boot)
	}
	if err != nil || wrote != pid {
		return "", pid, false
	}
	return boot, pid, true
}

// KubeletLog returns the machine's kubelet log (all boots).
func (m *Machine) KubeletLog() string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, "kubelet.log"))
	return string(b)
}

// pgid returns the process group of the running machine.
func (m *Machine) pgid() (int, error) {
	pid, alive := m.BMC.MachinePID()
	if !alive {
		return 0, fmt.Errorf("machine %s is not running", m.Name)
	}
	return pid, nil // the launcher leads its own group
}

// PowerLoss cuts the machine's power: SIGKILL to its whole process group.
// The BMC stays up and will read "off".
func (m *Machine) PowerLoss() error { return m.signalGroup(syscall.SIGKILL) }

// Hang freezes every process of the machine (SIGSTOP): the BMC reads "on",
// nothing on the machine answers, its writers stop mid-stream. It returns
// once the kernel shows every process of the machine stopped (state T) or
// dead — a signal takes effect when its process next runs, which on a
// loaded machine is not at once — so that a test knows the machine takes
// no further step.
func (m *Machine) Hang() error {
	pgid, err := m.pgid()
	if err != nil {
		return err
	}
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(killTimeout)
	for {
		running, err := groupRunning(pgid)
		if err == nil && running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hang of %s: %d process(es) of group %d not stopped %s after SIGSTOP (%v)", m.Name, running, pgid, killTimeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ProcessGroup returns the process group of the machine's running boot
// (its launcher leads it): BootGone(pgid) says when every process of that
// boot has died.
func (m *Machine) ProcessGroup() (int, error) { return m.pgid() }

// BootGone reports whether every process of the boot whose process group
// is pgid is dead (zombies count as dead): nothing of that boot can write
// again, even if someone sent it SIGCONT.
func BootGone(pgid int) bool { return !groupAlive(pgid) }

// Resume thaws a hung machine (SIGCONT): its writers carry on where they
// stopped — the hazard fencing exists to prevent.
func (m *Machine) Resume() error { return m.signalGroup(syscall.SIGCONT) }

func (m *Machine) signalGroup(sig syscall.Signal) error {
	pgid, err := m.pgid()
	if err != nil {
		return err
	}
	return syscall.Kill(-pgid, sig)
}

// PowerOffViaBMC switches the machine off through its BMC with ipmitool.
func (m *Machine) PowerOffViaBMC() error {
	_, err := m.BMC.IPMITool("chassis", "power", "off")
	return err
}

// PowerOnViaBMC switches the machine on through its BMC with ipmitool.
func (m *Machine) PowerOnViaBMC() error {
	_, err := m.BMC.IPMITool("chassis", "power", "on")
	return err
}

// PartitionFromAPI, PartitionFromPeers, Isolate and Heal cut or restore
// the machine's network (the BMC, on the management side, is untouched).
func (m *Machine) PartitionFromAPI() error   { return m.Host.PartitionFromAPI() }
func (m *Machine) PartitionFromPeers() error { return m.Host.PartitionFromPeers() }
func (m *Machine) Isolate() error            { return m.Host.Isolate() }
func (m *Machine) Heal() error               { return m.Host.Heal() }

// BMCDown makes the BMC stop answering (SIGSTOP of ipmi_sim); BMCUp undoes
// it, and so does a power cycle through the machine's feeds.
func (m *Machine) BMCDown() {
	m.feedMu.Lock()
	defer m.feedMu.Unlock()
	m.BMC.Freeze()
}

// BMCUp makes a downed BMC answer again — unless the machine's feeds are
// off: a BMC without power stays dark until they come back.
func (m *Machine) BMCUp() {
	m.feedMu.Lock()
	defer m.feedMu.Unlock()
	if !m.unpowered {
		m.BMC.Thaw()
	}
}

// BMCWrongPassword changes the password of the BMC account fenced uses,
// so that the password in the fencers' inventory is now wrong (a rotation
// nobody told fenced about). RestoreBMCPassword undoes it.
func (m *Machine) BMCWrongPassword() error {
	_, err := m.BMC.IPMITool("user", "set", "password", "2", "rotated-"+strconv.Itoa(rand.IntN(1e9)))
	return err
}

// RestoreBMCPassword sets the BMC account's password back to the one in
// the inventory.
func (m *Machine) RestoreBMCPassword() error {
	_, err := m.BMC.IPMITool("user", "set", "password", "2", m.BMC.Password)
	return err
}

// Machine returns the machine called name.
func (h *Harness) Machine(name string) *Machine {
	for _, m := range h.Machines {
		if m.Name == name {
			return m
		}
	}
	h.t.Fatalf("harness: no machine %q", name)
	return nil
}

// dumpMachineLogs logs what a failed test needs to be understood. CI shows
// only the start of a failure's output, so it begins with what each fencer
// last decided about each node, then the agents' logs, and only then the
// machines' and kubelets' logs (without the kubelet's periodic noise).
func (h *Harness) dumpMachineLogs() {
	for _, m := range h.Machines {
		if m.Fencer {
			h.t.Logf("---- %s: the last decision on each node\n%s", m.Name, lastDecisions(m.AgentLog()))
		}
	}
	for _, m := range h.Machines {
		h.t.Logf("---- %s extra-0-fenced.log (last 40 lines)\n%s", m.Name, cluster.TailFile(filepath.Join(m.Dir, "extra-0-fenced.log"), 40))
	}
	for _, m := range h.Machines {
		h.t.Logf("---- %s machine.log (last 20 lines)\n%s", m.Name, cluster.TailFile(filepath.Join(m.Dir, "machine.log"), 20))
		h.t.Logf("---- %s kubelet.log (last 20 lines that are not periodic noise)\n%s", m.Name, withoutKubeletNoise(cluster.TailFile(filepath.Join(m.Dir, "kubelet.log"), 400), 20))
	}
	h.t.Logf("---- attacher.log (last 40 lines)\n%s", cluster.TailFile(filepath.Join(h.Dir, "attacher.log"), 40))
}

// lastDecisions returns, from a fencer's log, the last "msg=decision" line
// for each node, in the order of the nodes' names.
func lastDecisions(log string) string {
	last := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, " msg=decision ") {
			continue
		}
		if _, rest, ok := strings.Cut(line, " node="); ok {
			node, _, _ := strings.Cut(rest, " ")
			last[node] = line
		}
	}
	if len(last) == 0 {
		return "(no decision logged)"
	}
	var out []string
	for _, node := range slices.Sorted(maps.Keys(last)) {
		out = append(out, last[node])
	}
	return strings.Join(out, "\n")
}

// kubeletNoise are the hollow kubelet's periodic complaints about image
// filesystems it does not have: they say nothing about a failure.
var kubeletNoise = []string{"eviction_manager.go", "imageFs information is unavailable", "imagefs device is not found"}

// withoutKubeletNoise returns the last n lines of text that are not
// kubeletNoise.
func withoutKubeletNoise(text string, n int) string {
	var kept []string
	for _, line := range strings.Split(text, "\n") {
		if !slices.ContainsFunc(kubeletNoise, func(noise string) bool { return strings.Contains(line, noise) }) {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept[max(0, len(kept)-n):], "\n")
}

// built holds the binaries compiled once per test binary, by package.
var built struct {
	sync.Mutex
	paths map[string]string
	dirs  []string
}

// buildOnce compiles the main package pkg once per test binary into a
// temp dir that Cleanup removes, and returns the binary's path.
func buildOnce(pkg string) (string, error) {
	built.Lock()
	defer built.Unlock()
	if p, ok := built.paths[pkg]; ok {
		return p, nil
	}
	dir, err := os.MkdirTemp("", "fenced-build-")
	if err != nil {
		return "", err
	}
	built.dirs = append(built.dirs, dir)
	out := filepath.Join(dir, filepath.Base(pkg))
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	if built.paths == nil {
		built.paths = map[string]string{}
	}
	built.paths[pkg] = out
	return out, nil
}

// Cleanup removes what Start built once per test binary; call it from
// TestMain after m.Run.
func Cleanup() {
	built.Lock()
	defer built.Unlock()
	for _, d := range built.dirs {
		_ = os.RemoveAll(d)
	}
	built.dirs, built.paths = nil, nil
}

// ParallelInotifyInstances is the host's inotify instance limit
// (fs.inotify.max_user_instances) below which Parallel keeps the scenarios
// one at a time. Every kubelet takes several instances; two harnesses of
// up to eight machines and the real node beside them ran out at Debian's
// default of 128 (hollow kubelets never registered their CSI plugin, the
// real kubelet never became Ready). make deps raises the limit to 1024.
const ParallelInotifyInstances = 512

// Parallel marks an end-to-end test as one that may run beside the others
// (t.Parallel): every harness has its own control plane, network and
// machines, and most of a scenario's time is spent waiting on Kubernetes,
// so two at a time use the second core that one at a time left idle. It
// does so only when the host allows enough inotify instances; otherwise it
// says why the test runs alone.
func Parallel(t *testing.T) {
	t.Helper()
	limit, err := inotifyInstanceLimit()
	switch {
	case err != nil:
		t.Logf("harness: running alone: cannot read the inotify instance limit: %v", err)
	case limit < ParallelInotifyInstances:
		t.Logf("harness: running alone: fs.inotify.max_user_instances is %d, below the %d that scenarios side by side need (make deps raises it as root)", limit, ParallelInotifyInstances)
	default:
		t.Parallel()
	}
}

func inotifyInstanceLimit() (int, error) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
