package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"fenced.io/fenced/internal/testbed/machine"
	"fenced.io/fenced/internal/testbed/wdemu"
	"fenced.io/fenced/pkg/vocab"
)

// The watchdog level on the harness (docs/design.md §10). The machines are
// processes on one kernel with no watchdog of their own, so each machine
// fenced on its watchdog gets one outside it (internal/testbed/wdemu),
// which its agent opens like a device through a unix socket. When it is
// not petted in time it resets the machine as a hardware watchdog does,
// whatever the machine's software is doing — hung, killed, cut off: every
// process of the running boot is killed at once, then the BMC switches the
// machine on again and it boots (BootDelay) with a new boot ID. A machine
// without power runs no watchdog: one that fires while its machine is off,
// or that was last petted by an earlier boot, changes nothing.

// Watchdog puts machines on the watchdog level (Fencing.Watchdog).
type Watchdog struct {
	// Machines are fenced on their watchdog alone: the fencers' topology
	// gives them the levels [[watchdog]] (every other machine [[bmc]]),
	// each has its emulated watchdog, and its agent's configuration names
	// it (WatchdogDevice) as an observer's configuration does.
	Machines []string
	// NoDevice are machines of Machines whose agents' configuration names
	// a watchdog that is not there (a driver never loaded): they never arm.
	NoDevice []string
	// Section is added to every watchdog section in YAML flow style, e.g.
	// "timeout: 2s, confirm: 5s" (default: nothing, the built-in values).
	Section string
	// MachineSections replace Section in the named machines' agents'
	// configuration: their own timeout and confirm period, which their
	// armed statements carry to the fencers.
	MachineSections map[string]string
}

// machineWatchdogDevice stands for WatchdogDevice(machine) in the
// configurations that MachineConfigFile's are made from.
const machineWatchdogDevice = "MACHINE-WATCHDOG-DEVICE"

// WatchdogDevice is what machine m's agent configuration names as its
// watchdog (Fencing.Watchdog): the socket of its emulated watchdog.
func (m *Machine) WatchdogDevice() string {
	return vocab.WatchdogSocketPrefix + filepath.Join(m.Dir, "watchdog.sock")
}

// fencerConfig returns the fencers' topology and watchdog sections (the
// device is machineWatchdogDevice).
func (w *Watchdog) fencerConfig() string {
	var nodes []string
	for _, name := range w.Machines {
		nodes = append(nodes, fmt.Sprintf("{name: %s, levels: [[%s]]}", name, vocab.DeviceWatchdog))
	}
	return "topology: {defaults: [[bmc]], nodes: [" + strings.Join(nodes, ", ") + "]}\n" + w.section(w.Section)
}

// agentConfig returns the watchdog section of machine's agent, "" for a
// machine not on the watchdog level.
func (w *Watchdog) agentConfig(machine string) string {
	if !slices.Contains(w.Machines, machine) {
		return ""
	}
	if own, ok := w.MachineSections[machine]; ok {
		return w.section(own)
	}
	return w.section(w.Section)
}

// section is a watchdog section with extra settings, its device
// machineWatchdogDevice.
func (w *Watchdog) section(extra string) string {
	s := "device: " + machineWatchdogDevice
	if extra != "" {
		s += ", " + extra
	}
	return "watchdog: {" + s + "}\n"
}

// startWatchdogs starts the emulated watchdog of every machine of w that
// has one; closeWatchdogs stops them at cleanup, before the machines stop.
func (h *Harness) startWatchdogs(w *Watchdog) error {
	h.t.Cleanup(h.closeWatchdogs)
	for _, name := range w.Machines {
		m := h.Machine(name)
		if slices.Contains(w.NoDevice, name) {
			continue
		}
		dog, err := wdemu.Start(strings.TrimPrefix(m.WatchdogDevice(), vocab.WatchdogSocketPrefix), func() { h.watchdogFired(m) })
		if err != nil {
			return err
		}
		m.watchdog = dog
	}
	return nil
}

// closeWatchdogs stops every machine's watchdog and any reset to come; it
// waits for one under way. Safe to call twice.
func (h *Harness) closeWatchdogs() {
	h.watchdogMu.Lock()
	defer h.watchdogMu.Unlock()
	h.watchdogsClosed = true
	for _, m := range h.Machines {
		if m.watchdog != nil {
			_ = m.watchdog.Close()
		}
	}
}

// watchdogFired resets m when its watchdog fires, unless the boot it would
// reset never petted it (the watchdog of a machine that lost power, or of
// a boot before this one, stopped with its power).
func (h *Harness) watchdogFired(m *Machine) {
	h.watchdogMu.Lock()
	defer h.watchdogMu.Unlock()
	if h.watchdogsClosed {
		return
	}
	_, lastPet := m.watchdog.Armed()
	boot, pid, known := m.RunningBoot()
	if pid == 0 || !known {
		return // off, or a boot just switched on: after any pet
	}
	if st, err := os.Stat(filepath.Join(m.Dir, machine.BootFile)); err != nil || st.ModTime().After(lastPet) {
		return
	}
	if err := killBoot(pid); err != nil {
		h.t.Logf("harness: %s's watchdog fired, but killing boot %s failed: %v", m.Name, boot, err)
		return
	}
	m.watchdogResets.Add(1)
	hold := m.watchdogHold.Load()
	h.t.Logf("harness: %s's watchdog fired %s after its last pet: boot %s reset%s", m.Name,
		time.Since(lastPet).Round(time.Millisecond), boot, map[bool]string{true: ", the machine held off", false: ""}[hold])
	if hold {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), bmcBootTimeout)
	defer cancel()
	if err := m.WaitPower(ctx, "off", bmcBootTimeout); err != nil {
		h.t.Logf("harness: %s after its watchdog reset: %v", m.Name, err)
		return
	}
	if err := m.PowerOnViaBMC(); err != nil {
		h.t.Logf("harness: %s after its watchdog reset: switching it on: %v", m.Name, err)
	}
}

// HoldAfterWatchdogReset makes a reset by m's watchdog leave it off until
// the test switches it on (PowerOnViaBMC), as a server whose firmware
// takes minutes to come back: a test then sees what fenced does with a
// node that was reset before it boots again. Without it the machine boots
// at once.
func (m *Machine) HoldAfterWatchdogReset(hold bool) { m.watchdogHold.Store(hold) }

// WatchdogResets is how many boots of m its watchdog reset.
func (m *Machine) WatchdogResets() int { return int(m.watchdogResets.Load()) }

// WatchdogArmed reports whether m's watchdog counts down now (false for a
// machine without one).
func (m *Machine) WatchdogArmed() bool {
	if m.watchdog == nil {
		return false
	}
	armed, _ := m.watchdog.Armed()
	return armed
}
