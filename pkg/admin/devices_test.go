package admin

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/vocab"
)

// fakeLevels gives each node its fencing levels, as *device.Inventory
// does from a configuration.
type fakeLevels map[string][][]device.Plug

func (l fakeLevels) Levels(node string) [][]device.Plug { return l[node] }

// testDevices is a PowerDevices over levels, printing no progress.
func testDevices(levels fakeLevels) *PowerDevices {
	return &PowerDevices{levels: levels, close: func() error { return nil }, progress: io.Discard}
}

// pduPlug is one outlet of a PDU; a nil b is a device the configuration
// does not declare (reading it is an error, never off).
func pduPlug(pdu, outlet string, b *fakeBMC) device.Plug {
	p := device.Plug{Device: pdu, Plug: outlet, Key: pdu, Endpoint: pdu + "/" + outlet}
	if b != nil {
		p.Driver = b
	}
	return p
}

func TestPowerDevicesUse(t *testing.T) {
	fast := SwitchOptions{PowerWait: time.Millisecond, Timeout: 5 * time.Second, Progress: io.Discard}
	cases := []struct {
		name         string
		level        int
		op           PowerOp
		levels       func(bmc, outlet *fakeBMC) fakeLevels
		wantOK       bool
		wantDecision string
		wantPlugs    int
		wantOutlet   vocab.PowerState // the outlet's state afterwards
	}{
		{"status: the BMC decides", 0, PowerStatus, func(bmc, outlet *fakeBMC) fakeLevels {
			return fakeLevels{"n": {{device.BMCPlug("n", bmc, "ipmi://bmc-n:623")}, {pduPlug("pdu-a", "1", outlet)}}}
		}, true, "power on (level 1, the BMC decides)", 2, vocab.PowerOn},
		{"status of level 2 alone", 2, PowerStatus, func(bmc, outlet *fakeBMC) fakeLevels {
			return fakeLevels{"n": {{device.BMCPlug("n", bmc, "ipmi://bmc-n:623")}, {pduPlug("pdu-a", "1", outlet)}}}
		}, true, "power on (level 2 decides)", 1, vocab.PowerOn},
		{"status: nothing answers", 0, PowerStatus, func(_, _ *fakeBMC) fakeLevels {
			return fakeLevels{"n": {{pduPlug("pdu-dark", "3", nil)}}}
		}, false, "no level could be read: level 1: pdu-dark:3", 1, vocab.PowerOn},
		{"off: the first level that switches", 0, PowerOff, func(_, outlet *fakeBMC) fakeLevels {
			return fakeLevels{"n": {{pduPlug("pdu-dark", "3", nil)}, {pduPlug("pdu-a", "1", outlet)}}}
		}, true, "power-off done on level 2", 2, vocab.PowerOff},
		{"off: only the level asked for", 1, PowerOff, func(_, outlet *fakeBMC) fakeLevels {
			return fakeLevels{"n": {{pduPlug("pdu-dark", "3", nil)}, {pduPlug("pdu-a", "1", outlet)}}}
		}, false, "level 1: pdu-dark:3", 1, vocab.PowerOn},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bmc, outlet := &fakeBMC{state: vocab.PowerOn}, &fakeBMC{state: vocab.PowerOn}
			res := testDevices(tc.levels(bmc, outlet)).Use(t.Context(), "n", tc.level, tc.op, fast)
			if res.OK != tc.wantOK || !strings.Contains(res.Decision, tc.wantDecision) || len(res.Plugs) != tc.wantPlugs {
				t.Errorf("ok %v, decision %q, %d plugs; want %v, %q, %d", res.OK, res.Decision, len(res.Plugs), tc.wantOK, tc.wantDecision, tc.wantPlugs)
			}
			if got, _ := outlet.PowerState(t.Context()); got != tc.wantOutlet {
				t.Errorf("the outlet reads %s afterwards, want %s", got, tc.wantOutlet)
			}
			if res.Action != tc.op.coreOp() || res.Node != "n" {
				t.Errorf("result names %s %s", res.Action, res.Node)
			}
		})
	}
}

func TestCheckTopology(t *testing.T) {
	devs := testDevices(fakeLevels{
		"node-a": {{device.BMCPlug("node-a", &fakeBMC{state: vocab.PowerOn}, "ipmi://bmc-a:623")}, {pduPlug("pdu-a", "1", &fakeBMC{state: vocab.PowerOff})}},
		"node-b": {{pduPlug("pdu-dark", "3", nil)}},
	})
	c := devs.CheckTopology(t.Context(), []string{"node-a", "node-b"})
	if !slices.Equal(c.Unfenceable, []string{"node-b"}) || len(c.Levels) != 3 {
		t.Fatalf("unfenceable %v, %d rows; want [node-b], 3", c.Unfenceable, len(c.Levels))
	}
	if err := c.Err(); err == nil || err.Error() != "1 node(s) cannot be fenced automatically: node-b" {
		t.Errorf("Err() = %v", err)
	}
	var out bytes.Buffer
	if err := printer.Print(&out, "text", c.Doc()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node-a  1      power on", "node-a  2      power off", "node-b  1      CANNOT READ",
		"node-b: no fencing level answers: it cannot be fenced automatically now"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if (TopologyCheck{}).Err() != nil {
		t.Error("a check without unfenceable nodes fails")
	}
}

func TestBMCHint(t *testing.T) {
	e := config.ResolvedBMC{Node: "n", Protocol: config.ProtocolIPMI, Address: "10.0.0.1", Port: 623, Username: "admin",
		Password: config.PasswordSource{File: "/etc/fenced/n.pw"}, Timeout: 2 * time.Second, Retries: new(3), IPMIPrivilegeLevel: "operator"}
	kind := func(k vocab.ErrorKind) error {
		return &device.Error{Node: "n", Op: vocab.OpPowerStatus, Kind: k, Err: errors.New("x")}
	}
	cases := []struct {
		err  error
		want string
	}{
		{kind(vocab.KindAuth), `the BMC refused user "admin": check the password (file /etc/fenced/n.pw) and that the user may open operator sessions`},
		{kind(vocab.KindUnreachable), "nothing answers at ipmi://10.0.0.1:623: check the address"},
		{kind(vocab.KindTimeout), "no answer from ipmi://10.0.0.1:623 within the timeout (2s per attempt, 3 retries)"},
		{kind(vocab.KindBMC), ""},
		{errors.New("not a driver's"), ""},
	}
	for _, tc := range cases {
		got := bmcHint(tc.err, e)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("bmcHint(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	// An entry whose file sets none of its settings: the hint names
	// those the driver ran with, the device package's defaults.
	unset := config.ResolvedBMC{Node: "n", Protocol: config.ProtocolIPMI, Address: "10.0.0.1", Username: "admin",
		Password: config.PasswordSource{File: "/etc/fenced/n.pw"}}
	for err, want := range map[error]string{
		kind(vocab.KindTimeout): "no answer from ipmi://10.0.0.1:623 within the timeout (5s per attempt, 2 retries)",
		kind(vocab.KindAuth):    "may open administrator sessions",
	} {
		if got := bmcHint(err, unset); !strings.Contains(got, want) {
			t.Errorf("bmcHint(%v) of an entry with its settings unset = %q, want %q", err, got, want)
		}
	}
}

func TestBMCResultText(t *testing.T) {
	cases := []struct {
		name string
		res  BMCResult
		want string
	}{
		{"status without a GUID", BMCResult{Node: "n", Endpoint: "ipmi://b:623", Action: "status", Power: "on"},
			"node:        n\nbmc:         ipmi://b:623\npower:       on\nsystem GUID: (not reported)\n"},
		{"already off", BMCResult{Node: "n", Endpoint: "ipmi://b:623", Action: "off", Power: "off", Already: true},
			"n: power already off, nothing sent (ipmi://b:623)\n"},
		{"switched", BMCResult{Node: "n", Endpoint: "ipmi://b:623", Action: "cycle", Power: "on", ElapsedMS: 12345},
			"n: power cycle done, BMC reads on after 12.35s (ipmi://b:623)\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printer.Print(&out, "text", tc.res.Doc()); err != nil || out.String() != tc.want {
				t.Errorf("Write = %q, %v; want %q", out.String(), err, tc.want)
			}
		})
	}
}

func TestConfiguredNodes(t *testing.T) {
	cfg := &config.Config{
		BMCs:     []config.ResolvedBMC{{Node: "c"}, {Node: "a"}},
		Topology: config.Topology{Nodes: map[string][]config.Level{"b": nil, "a": nil}},
		Devices:  map[string]config.FenceDevice{"pdu": {Plugs: map[string]string{"d": "1", "c": "2"}}},
	}
	if got := ConfiguredNodes(cfg); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("ConfiguredNodes = %v", got)
	}
}

// TestStillWaiting: a silent terminal looks hung, so a long wait says so.
func TestStillWaiting(t *testing.T) {
	var out syncBuf
	stop := stillWaiting(&out, "n: level 2: power-off", 5*time.Millisecond)
	time.Sleep(30 * time.Millisecond)
	stop()
	n := strings.Count(out.String(), "n: level 2: power-off: still waiting (")
	time.Sleep(20 * time.Millisecond)
	if n == 0 || strings.Count(out.String(), "still waiting") != n {
		t.Errorf("%d lines, then more after stop:\n%s", n, out.String())
	}
}
