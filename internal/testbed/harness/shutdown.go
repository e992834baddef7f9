package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"fenced.io/fenced/internal/testbed/logind"
	"fenced.io/fenced/internal/testbed/machine"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/shutdown"
)

// Shutdown shuts the machine down cleanly, the way `systemctl poweroff`
// does: PowerOff through the machine's logind. It returns once the
// shutdown has begun. logind then announces PrepareForShutdown, waits
// until every delay inhibitor lock (the kubelet's, the fenced agent's) is
// released or its inhibit delay has passed, and the machine switches
// itself off: the BMC reads off, and PowerOnViaBMC boots it again.
func (m *Machine) Shutdown(ctx context.Context) error {
	if _, alive := m.BMC.MachinePID(); !alive {
		return fmt.Errorf("machine %s is not running", m.Name)
	}
	return logind.PowerOff(ctx, m.BusAddress())
}

// HoldMounts makes the machine's CSI plugin fail every NodeUnpublishVolume
// as a busy unmount would, so that its volumes stay mounted and their
// writers keep writing, until ReleaseMounts. It holds across reboots.
func (m *Machine) HoldMounts() error {
	return os.WriteFile(machine.HoldMountsFile(m.Dir), []byte("held by the test harness\n"), 0o644)
}

// ReleaseMounts undoes HoldMounts; the kubelet's next retry unmounts.
func (m *Machine) ReleaseMounts() error {
	if err := os.Remove(machine.HoldMountsFile(m.Dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// BusAddress is the machine's D-Bus system bus address, where its logind
// serves (the value of DBUS_SYSTEM_BUS_ADDRESS on the machine).
func (m *Machine) BusAddress() string { return machine.BusAddress(m.Dir) }

// KubeletRootDir is the kubelet's --root-dir on the machine.
func (m *Machine) KubeletRootDir() string { return machine.KubeletRootDir(m.Dir) }

// Inhibitors lists the inhibitor locks held on the machine.
func (m *Machine) Inhibitors(ctx context.Context) ([]logind.Inhibitor, error) {
	return logind.Inhibitors(ctx, m.BusAddress())
}

// CSIMounts returns the CSI volume mounts under the kubelet's root dir
// (pods' …/kubernetes.io~csi/… targets and the plugins/kubernetes.io/csi/…
// staging paths) as the running machine sees them: they are in the
// machine's own mount namespace, so this reads its launcher's mountinfo.
func (m *Machine) CSIMounts() ([]string, error) {
	pid, alive := m.BMC.MachinePID()
	if !alive {
		return nil, fmt.Errorf("machine %s is not running", m.Name)
	}
	table := shutdown.MountTable{Path: fmt.Sprintf("/proc/%d/mountinfo", pid), KubeletRootDir: m.KubeletRootDir()}
	return table.CSIMounts()
}

// WaitPower waits until the machine's BMC reads want ("on" or "off").
func (m *Machine) WaitPower(ctx context.Context, want string, timeout time.Duration) error {
	var got string
	var err error
	werr := poll.UntilContext(ctx, 100*time.Millisecond, timeout, func(context.Context) bool {
		got, err = m.BMC.ToolPowerState()
		return got == want
	})
	if werr != nil {
		return fmt.Errorf("machine %s: BMC reads %q (%v) after %s, want %q", m.Name, got, err, timeout, want)
	}
	return nil
}
