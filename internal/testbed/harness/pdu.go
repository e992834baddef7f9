package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"fenced.io/fenced/internal/testbed/pdusim"
)

// Power feeds (Options.Feeds): the machines are fed by switched rack PDUs,
// each a pdusim (net-snmp snmpd serving the APC PowerNet-MIB outlets that
// ClusterLabs' fence_apc_snmp switches). The physics of a feed:
//
//   - A machine has power while at least one of its outlets is on (dual
//     power supplies on two PDUs: one outlet off changes nothing).
//   - When its last outlet goes off, its BMC goes dark first (ipmi_sim is
//     frozen: it sits on the same feed, answers nothing, and so is never seen
//     reading the machine "off"), then every process of the machine dies
//     (SIGKILL of its process group, as PowerLoss).
//   - When an outlet comes back on, the BMC comes back first (thawed, and
//     answering again), then the BIOS's "restore on AC power loss" policy
//     decides: the harness's policy is "restore last state" — a machine
//     that was on when it lost its power is switched on through its BMC
//     (chassis power on) and boots as after any power on (BootDelay, a new
//     boot ID); a machine that was off (PowerOffViaBMC, a clean shutdown, a
//     fence) stays off.
//   - A BMC made to hang with BMCDown is rebooted by the power cycle: it
//     answers again once its feed is back. BMCUp while the feed is off does
//     nothing — a BMC without power cannot answer.
//
// Outlets are switched by tests (PDU(name).SetOutlet, Machine.CutFeeds,
// CutFeed, RestoreFeeds, RestoreFeed) or over SNMP by a fence agent; both
// reach the machine through pdusim's OnChange, so an SNMP "off" by
// fence_apc_snmp kills the machine as a pulled cord does. Changes made by
// hand have taken effect (machine dead, or BMC up and machine switched on)
// when SetOutlet or the Machine helper returns; SNMP writes within
// pdusim's watch interval (10 ms) plus the BMC's start.

// pduNames are the PDUs' names in order: with Options.Feeds n, the first n
// exist and machine i is on outlet i+1 of each.
var pduNames = []string{"pdu-a", "pdu-b"}

// MaxFeeds is the largest Options.Feeds: dual power supplies.
const MaxFeeds = 2

// pduOutlets is the smallest PDU the harness builds: a common 1U model.
const pduOutlets = 8

// bmcBootTimeout bounds how long a BMC may take to answer after its feed
// came back.
const bmcBootTimeout = 30 * time.Second

// Outlet is one power feed of a machine: outlet Number (1-based, as the
// PDU and fence_apc_snmp's plug= number them) of the PDU named PDU.
type Outlet struct {
	PDU    string
	Number int
}

// PDU is one of the harness's switched rack PDUs: a running pdusim (its
// Name, Host, Port, Community, Addr, Outlet, SetOutlet, OnChange, …) and
// the file that holds its community.
type PDU struct {
	*pdusim.PDU
	// CommunityFile holds the SNMP v2c read-write community (one line,
	// mode 0600), as the BMC password files hold the BMC passwords: what a
	// fence device's secretOptions point at.
	CommunityFile string
}

// feed is one outlet of a machine and the PDU it is on.
type feed struct {
	Outlet
	pdu *PDU
}

// PDUs returns the harness's PDUs (none unless Options.Feeds is set), in
// order: pdu-a, then pdu-b.
func (h *Harness) PDUs() []*PDU { return slices.Clone(h.pdus) }

// PDU returns the PDU called name, failing the test if there is none.
func (h *Harness) PDU(name string) *PDU {
	for _, p := range h.pdus {
		if p.Name == name {
			return p
		}
	}
	h.t.Fatalf("harness: no PDU %q (Options.Feeds is %d)", name, len(h.pdus))
	return nil
}

// startPDUs starts n PDUs on the machines' management side, where their
// BMCs listen, names every machine's outlets after the machine, and writes
// the community files. The physics is wired by wirePDUs once the BMCs run.
func (h *Harness) startPDUs(n int) error {
	if n < 0 || n > MaxFeeds {
		return fmt.Errorf("power feeds: %d, want 0 to %d", n, MaxFeeds)
	}
	if n == 0 {
		return nil
	}
	dir := filepath.Join(h.Dir, "pdu")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	names := make([]string, len(h.Machines))
	for i, m := range h.Machines {
		names[i] = m.Name
	}
	for _, name := range pduNames[:n] {
		p := &PDU{PDU: pdusim.Start(h.t, pdusim.Options{
			Name:    name,
			Outlets: max(pduOutlets, len(h.Machines)),
			Names:   names,
			// The gateway: reachable from every machine's namespace (the
			// fencers' agents run there) and from the root namespace, and
			// not cut by a machine's partitions — as the BMCs.
			Addr: h.Net.Gateway.String(),
			Dir:  filepath.Join(dir, name),
		})}
		p.CommunityFile = filepath.Join(dir, name+".community")
		if err := os.WriteFile(p.CommunityFile, []byte(p.Community+"\n"), 0o600); err != nil {
			return err
		}
		h.pdus = append(h.pdus, p)
		for i, m := range h.Machines {
			m.feeds = append(m.feeds, feed{Outlet: Outlet{PDU: name, Number: i + 1}, pdu: p})
		}
	}
	return nil
}

// wirePDUs makes every outlet change reach the machine on it.
func (h *Harness) wirePDUs() {
	for _, p := range h.pdus {
		byOutlet := map[int]*Machine{}
		for _, m := range h.Machines {
			for _, f := range m.feeds {
				if f.pdu == p {
					byOutlet[f.Number] = m
				}
			}
		}
		p.OnChange(func(outlet int, _ bool) {
			// The current state of all its outlets decides, not this
			// one change: callbacks of two PDUs run concurrently.
			if m := byOutlet[outlet]; m != nil {
				if err := m.feedChanged(); err != nil {
					h.t.Logf("harness: machine %s: outlet %d of %s: %v", m.Name, outlet, p.Name, err)
				}
			}
		})
	}
}

// stopPDUs stops the PDUs' snmpd and change watchers, so that no outlet
// change reaches a machine being torn down.
func (h *Harness) stopPDUs() {
	for _, p := range h.pdus {
		p.Stop()
	}
}

// Outlets returns the machine's power feeds (none unless Options.Feeds is
// set): outlet i+1 of pdu-a, and of pdu-b with two feeds, for machine i.
func (m *Machine) Outlets() []Outlet {
	out := make([]Outlet, len(m.feeds))
	for i, f := range m.feeds {
		out[i] = f.Outlet
	}
	return out
}

// Powered reports whether the machine has power at its inputs: at least
// one of its outlets is on (always, without feeds).
func (m *Machine) Powered() bool {
	m.feedMu.Lock()
	defer m.feedMu.Unlock()
	return !m.unpowered
}

// CutFeeds switches every outlet of the machine off: when it returns, the
// machine's BMC is dark and its processes are dead.
func (m *Machine) CutFeeds() error { return m.setFeeds(false, -1) }

// CutFeed switches the machine's outlet i (an index into Outlets) off.
func (m *Machine) CutFeed(i int) error { return m.setFeeds(false, i) }

// RestoreFeeds switches every outlet of the machine on: when it returns, a
// machine that lost its power has its BMC answering again and, if it was
// on before the loss, has been switched on (it is booting).
func (m *Machine) RestoreFeeds() error { return m.setFeeds(true, -1) }

// RestoreFeed switches the machine's outlet i (an index into Outlets) on.
func (m *Machine) RestoreFeed(i int) error { return m.setFeeds(true, i) }

// setFeeds switches outlet i, or every outlet for i < 0, and returns what
// went wrong in the physics meanwhile.
func (m *Machine) setFeeds(on bool, i int) error {
	if len(m.feeds) == 0 {
		return fmt.Errorf("machine %s has no power feeds (Options.Feeds is 0)", m.Name)
	}
	if i >= len(m.feeds) {
		return fmt.Errorf("machine %s has %d feeds, no feed %d", m.Name, len(m.feeds), i)
	}
	for j, f := range m.feeds {
		if i < 0 || i == j {
			f.pdu.SetOutlet(f.Number, on) // runs the physics before it returns
		}
	}
	m.feedMu.Lock()
	defer m.feedMu.Unlock()
	err := m.powerErr
	m.powerErr = nil
	return err
}

// feedChanged brings the machine in line with its outlets' current state.
// What goes wrong is also kept for the next CutFeeds/RestoreFeeds to return.
func (m *Machine) feedChanged() error {
	m.feedMu.Lock()
	defer m.feedMu.Unlock()
	powered, err := m.anyOutletOn()
	switch {
	case err != nil:
	case !powered && !m.unpowered:
		err = m.loseAC()
	case powered && m.unpowered:
		err = m.regainAC()
	}
	m.powerErr = errors.Join(m.powerErr, err)
	return err
}

// anyOutletOn reads the machine's outlets from the PDUs' state files.
func (m *Machine) anyOutletOn() (bool, error) {
	for _, f := range m.feeds {
		outlets, err := pdusim.ReadState(f.pdu.StatePath)
		if err != nil {
			return false, err
		}
		if f.Number > len(outlets) {
			return false, fmt.Errorf("%s has %d outlets, no outlet %d", f.PDU, len(outlets), f.Number)
		}
		if outlets[f.Number-1].On {
			return true, nil
		}
	}
	return false, nil
}

// loseAC is the machine's last outlet going off. Called with feedMu held.
func (m *Machine) loseAC() error {
	pid, on := m.BMC.MachinePID()
	m.unpowered, m.onAtLoss = true, on
	// The BMC first: a fencer must never see it read "off", which a live
	// BMC would for a dead machine.
	m.BMC.Freeze()
	if !on {
		return nil
	}
	// The launcher leads the machine's group.
	if err := killBoot(pid); err != nil {
		return fmt.Errorf("power loss: %w", err)
	}
	return nil
}

// killBoot kills every process of the boot whose process group is pgid
// (SIGKILL) and waits until they are dead: SIGKILL is not instant for a
// process with many threads, and callers rely on the boot being over.
func killBoot(pgid int) error {
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	deadline := time.Now().Add(killTimeout)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of group %d still alive %s after SIGKILL", pgid, killTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// killTimeout bounds the wait for a SIGKILLed machine's processes to die.
const killTimeout = 10 * time.Second

// groupAlive reports whether a process of group pgid is alive: neither
// gone nor a zombie (the launcher stays one until its frozen BMC reaps it).
func groupAlive(pgid int) bool {
	alive := false
	err := eachOfGroup(pgid, func(_ int, state byte) { alive = alive || (state != 'Z' && state != 'X') })
	return err == nil && alive
}

// groupRunning counts the threads of group pgid's processes that are alive
// and not stopped (state T or t). Threads, not processes: a signal stops
// each thread of a process when that thread next runs, and the process's
// own state is only its first thread's.
func groupRunning(pgid int) (int, error) {
	n := 0
	err := eachOfGroup(pgid, func(pid int, _ byte) {
		tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
		if err != nil {
			return // gone meanwhile
		}
		for _, task := range tasks {
			state, _, err := statFile(filepath.Join("/proc", strconv.Itoa(pid), "task", task.Name(), "stat"))
			if err == nil && state != 'Z' && state != 'X' && state != 'T' && state != 't' {
				n++
			}
		}
	})
	return n, err
}

// eachOfGroup calls f with the PID and state of every process of group
// pgid.
func eachOfGroup(pgid int, f func(pid int, state byte)) error {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if state, group, err := procStat(pid); err == nil && group == pgid {
			f(pid, state)
		}
	}
	return nil
}

// regainAC is the first outlet coming back on. Called with feedMu held.
func (m *Machine) regainAC() error {
	m.unpowered = false
	m.BMC.Thaw() // also a BMC hung by BMCDown: the power cycle rebooted it
	// The BMC answers, and has noticed that its machine died while it was
	// dark: "off" until the restore policy switches it on.
	ctx, cancel := context.WithTimeout(context.Background(), bmcBootTimeout)
	defer cancel()
	if err := m.WaitPower(ctx, "off", bmcBootTimeout); err != nil {
		return fmt.Errorf("feed back, BMC not up: %w", err)
	}
	if !m.onAtLoss {
		return nil // restore last state: it was off
	}
	if err := m.PowerOnViaBMC(); err != nil {
		return fmt.Errorf("feed back, restoring power: %w", err)
	}
	return nil
}
