package harness

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/netns"
	"fenced.io/fenced/internal/testbed/poll"
)

// TestPowerFeeds shows the PDU physics on a harness with dual feeds: one
// outlet of two off changes nothing; both off kill the machine and darken
// its BMC, which fence_apc_snmp reads as off; power back brings the BMC and
// then the machine (a new boot) back; fence_apc_snmp's off over SNMP is a
// pulled cord too; and a machine that was off stays off ("restore last
// state").
func TestPowerFeeds(t *testing.T) {
	if testing.Short() {
		t.Skip(SkipShortMessage)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, BMC simulators")
	}
	if _, err := exec.LookPath("fence_apc_snmp"); err != nil {
		t.Fatal("fence_apc_snmp not found: install Debian's fence-agents package (hack/install-deps.sh does)")
	}
	ctx, h := StartForTest(t, Options{
		Machines: []string{"node-a", "node-b"},
		Feeds:    2,
		// NotReady within seconds of the power loss, not 50.
		Cluster: cluster.Options{ControllerManagerArgs: []string{"--node-monitor-grace-period=20s"}},
	})
	m, other := h.Machine("node-a"), h.Machine("node-b")

	// The accessors a fenceDevices entry is written from.
	if got, want := m.Outlets(), []Outlet{{"pdu-a", 1}, {"pdu-b", 1}}; !slices.Equal(got, want) {
		t.Fatalf("%s outlets %v, want %v", m.Name, got, want)
	}
	if got, want := other.Outlets(), []Outlet{{"pdu-a", 2}, {"pdu-b", 2}}; !slices.Equal(got, want) {
		t.Fatalf("%s outlets %v, want %v", other.Name, got, want)
	}
	if len(h.PDUs()) != 2 {
		t.Fatalf("%d PDUs, want 2", len(h.PDUs()))
	}
	for _, p := range h.PDUs() {
		fi, err := os.Stat(p.CommunityFile)
		must(t, err)
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: community file mode %v, want 0600", p.Name, fi.Mode().Perm())
		}
		if p.Host != h.Net.Gateway.String() {
			t.Errorf("%s listens on %s, want the gateway %s (where the BMCs are)", p.Name, p.Host, h.Net.Gateway)
		}
		if p.OutletName(1) != m.Name {
			t.Errorf("%s outlet 1 is named %q, want %q", p.Name, p.OutletName(1), m.Name)
		}
	}
	// From the root namespace and from another machine's, as a fencer's
	// agent runs it.
	where := []struct {
		name string
		host *netns.Host
	}{{"root namespace", nil}, {"from " + other.Name, other.Host}}
	status := func(t *testing.T, want int) {
		t.Helper()
		for _, o := range m.Outlets() {
			for _, w := range where {
				if got, out := fenceAPCSNMP(t, h, w.host, o, "status"); got != want {
					t.Errorf("fence_apc_snmp status %s:%d (%s): exit %d, want %d\n%s", o.PDU, o.Number, w.name, got, want, out)
				}
			}
		}
	}
	status(t, 0)

	bootBefore := m.BootID()
	if !t.Run("one of two feeds cut: nothing happens", func(t *testing.T) {
		pid, _ := m.BMC.MachinePID()
		must(t, m.CutFeed(0))
		time.Sleep(3 * time.Second)
		if p, alive := m.BMC.MachinePID(); !alive || p != pid || m.BootID() != bootBefore || !m.Powered() {
			t.Fatalf("machine changed on a single feed: pid %d alive %v (was %d), boot %s (was %s)", p, alive, pid, m.BootID(), bootBefore)
		}
		if got, err := m.BMC.ToolPowerState(); got != "on" {
			t.Fatalf("BMC reads %q, %v; want on", got, err)
		}
		if code, out := fenceAPCSNMP(t, h, other.Host, m.Outlets()[0], "status"); code != 2 {
			t.Fatalf("status of the cut outlet: exit %d, want 2\n%s", code, out)
		}
		must(t, h.WaitNodeReady(ctx, m.Name, 5*time.Second))
		must(t, m.RestoreFeed(0))
		if m.BootID() != bootBefore {
			t.Fatal("restoring a feed of a powered machine rebooted it")
		}
	}) {
		return
	}

	if !t.Run("both feeds cut: machine and BMC dark", func(t *testing.T) {
		t0 := time.Now()
		must(t, m.CutFeeds())
		if _, alive := m.BMC.MachinePID(); alive || m.Powered() {
			t.Fatal("machine still running after both feeds were cut")
		}
		if got, err := m.BMC.ToolPowerState(); err == nil {
			t.Fatalf("BMC answers %q without power", got)
		} else {
			t.Logf("ipmitool: %v", err)
		}
		m.BMCUp() // no power: it stays dark
		if got, err := m.BMC.ToolPowerState(); err == nil {
			t.Fatalf("BMCUp without power: BMC answers %q", got)
		}
		status(t, 2)
		must(t, h.WaitNodeNotReady(ctx, m.Name, time.Minute))
		t.Logf("NotReady %s after the cut", time.Since(t0).Round(time.Millisecond))
	}) {
		return
	}

	if !t.Run("feeds restored: BMC, then the machine, boots anew", func(t *testing.T) {
		t0 := time.Now()
		must(t, m.RestoreFeeds())
		// RestoreFeeds returned with the BMC up and the machine switched on.
		if got, err := m.BMC.ToolPowerState(); got != "on" {
			t.Fatalf("BMC reads %q, %v after the feeds came back; want on", got, err)
		}
		status(t, 0)
		must(t, h.WaitNodeReady(ctx, m.Name, 2*time.Minute))
		if m.BootID() == bootBefore || m.BootID() == "" {
			t.Fatalf("boot ID %q after the power came back, want a new one (was %s)", m.BootID(), bootBefore)
		}
		t.Logf("Ready %s after the feeds came back", time.Since(t0).Round(time.Millisecond))
	}) {
		return
	}

	if !t.Run("fence_apc_snmp off of both plugs: machine down; on: back", func(t *testing.T) {
		boot := m.BootID()
		for i, o := range m.Outlets() {
			if code, out := fenceAPCSNMP(t, h, other.Host, o, "off"); code != 0 {
				t.Fatalf("fence_apc_snmp off %s:%d: exit %d\n%s", o.PDU, o.Number, code, out)
			}
			if i == 0 && !m.Powered() {
				t.Fatal("machine lost power with one of its two outlets off")
			}
		}
		poll.Until(t, time.Minute, "machine down after the SNMP off", func() bool {
			_, alive := m.BMC.MachinePID()
			return !alive && !m.Powered()
		})
		if got, err := m.BMC.ToolPowerState(); err == nil {
			t.Fatalf("BMC answers %q after its feeds were switched off over SNMP", got)
		}
		if code, out := fenceAPCSNMP(t, h, other.Host, m.Outlets()[1], "on"); code != 0 {
			t.Fatalf("fence_apc_snmp on: exit %d\n%s", code, out)
		}
		must(t, m.WaitPower(ctx, "on", 30*time.Second))
		poll.Until(t, time.Minute, "a new boot", func() bool { return m.BootID() != boot })
		must(t, m.RestoreFeeds()) // pdu-a's outlet too
	}) {
		return
	}

	t.Run("off before the loss: stays off (restore last state)", func(t *testing.T) {
		must(t, m.PowerOffViaBMC())
		must(t, m.WaitPower(ctx, "off", 30*time.Second))
		boot := m.BootID()
		must(t, m.CutFeeds())
		must(t, m.RestoreFeeds())
		// The BMC answers at once (RestoreFeeds waited for it) and reads
		// off; give a wrong policy the time to switch the machine on.
		time.Sleep(2 * time.Second)
		if got, err := m.BMC.ToolPowerState(); got != "off" {
			t.Fatalf("BMC reads %q, %v; want off", got, err)
		}
		if _, alive := m.BMC.MachinePID(); alive || m.BootID() != boot {
			t.Fatalf("machine booted (boot %s, was %s) though it was off when its power went", m.BootID(), boot)
		}
	})
}

// fenceAPCSNMP runs ClusterLabs' fence_apc_snmp for outlet o with action,
// in host's network namespace (nil: the root one), with the options on
// stdin and the community read from the PDU's community file — what a
// fenceDevices entry with options {ip, ipport, snmp_version: "2c"} and
// secretOptions {community: file} amounts to. It returns the exit code
// and the combined output.
func fenceAPCSNMP(t *testing.T, h *Harness, host *netns.Host, o Outlet, action string) (int, string) {
	t.Helper()
	p := h.PDU(o.PDU)
	community, err := os.ReadFile(p.CommunityFile)
	must(t, err)
	stdin := strings.Join([]string{
		"action=" + action,
		"ip=" + p.Host,
		"ipport=" + strconv.Itoa(p.Port),
		"snmp_version=2c",
		"community=" + strings.TrimSpace(string(community)),
		"plug=" + strconv.Itoa(o.Number),
	}, "\n") + "\n"
	cmd := exec.Command("fence_apc_snmp")
	if host != nil {
		cmd = host.Command("fence_apc_snmp")
	}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("running fence_apc_snmp: %v", err)
	return 0, ""
}
