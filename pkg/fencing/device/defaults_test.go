package device

import (
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"fenced.io/fenced/pkg/config"
)

// TestDefaults keeps the device package's defaults what they were when
// pkg/config held them (docs/configuration.md lists them).
func TestDefaults(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"DefaultIPMIPort", DefaultIPMIPort, 623},
		{"DefaultRedfishHTTPSPort", DefaultRedfishHTTPSPort, 443},
		{"DefaultRedfishHTTPPort", DefaultRedfishHTTPPort, 80},
		{"DefaultBMCTimeout", DefaultBMCTimeout, 5 * time.Second},
		{"DefaultBMCRetries", DefaultBMCRetries, 2},
		{"DefaultIPMICipherSuite", DefaultIPMICipherSuite, 3},
		{"DefaultIPMIPrivilegeLevel", DefaultIPMIPrivilegeLevel, "administrator"},
		{"DefaultRedfishScheme", DefaultRedfishScheme, "https"},
		{"DefaultRedfishAuth", DefaultRedfishAuth, "session"},
		{"DefaultFenceAgentTimeout", DefaultFenceAgentTimeout, 60 * time.Second},
		{"DefaultPowerTimeout", DefaultPowerTimeout, 20 * time.Second},
		{"DefaultPowerWait", DefaultPowerWait, time.Second},
		{"DefaultPollInterval", DefaultPollInterval, time.Second},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestWithDefaults: what an entry leaves unset takes the package's
// default, the port the protocol's and scheme's; what it sets, 0 retries
// included, stays.
func TestWithDefaults(t *testing.T) {
	ipmi := config.ResolvedBMC{Node: "n", Protocol: config.ProtocolIPMI, Address: "10.0.0.1"}
	redfish := config.ResolvedBMC{Node: "n", Protocol: config.ProtocolRedfish, Address: "bmc.example"}
	defaulted := func(r config.ResolvedBMC, port int) config.ResolvedBMC {
		r.Port, r.Timeout, r.Retries = port, 5*time.Second, new(2)
		r.IPMICipherSuite, r.IPMIPrivilegeLevel, r.RedfishScheme, r.RedfishAuth = 3, "administrator", "https", "session"
		return r
	}
	set := ipmi
	set.Port, set.Timeout, set.Retries, set.IPMICipherSuite, set.IPMIPrivilegeLevel = 6230, time.Second, new(0), 17, "operator"
	plain := redfish
	plain.RedfishScheme = "http"
	wantPlain := defaulted(plain, 80)
	wantPlain.RedfishScheme = "http"
	wantSet := defaulted(set, 6230)
	wantSet.Timeout, wantSet.Retries, wantSet.IPMICipherSuite, wantSet.IPMIPrivilegeLevel = time.Second, new(0), 17, "operator"
	for _, c := range []struct {
		name     string
		in, want config.ResolvedBMC
		endpoint string
	}{
		{"ipmi, all unset", ipmi, defaulted(ipmi, 623), "ipmi://10.0.0.1:623"},
		{"redfish, all unset", redfish, defaulted(redfish, 443), "https://bmc.example:443"},
		{"redfish over http", plain, wantPlain, "http://bmc.example:80"},
		{"ipmi, all set (0 retries)", set, wantSet, "ipmi://10.0.0.1:6230"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := WithDefaults(c.in); !reflect.DeepEqual(got, c.want) {
				t.Errorf("WithDefaults =\n %+v (retries %d)\nwant\n %+v (retries %d)", got, *got.Retries, c.want, *c.want.Retries)
			}
			if got := Endpoint(c.in); got != c.endpoint {
				t.Errorf("Endpoint = %s, want %s", got, c.endpoint)
			}
		})
	}
}

// TestInventoryAppliesDeviceDefaults: a configuration that sets none of a
// BMC's settings loads with them unset (pkg/config), and the drivers the
// inventory builds from it run with this package's defaults — never with
// a zero timeout, which the IPMI driver would take as no bound of its own.
func TestInventoryAppliesDeviceDefaults(t *testing.T) {
	t.Setenv("FENCED_TEST_BMC_PASSWORD", "pw")
	cfg, err := config.Parse([]byte(`apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
bmc:
  defaults: {username: fenced, passwordEnv: FENCED_TEST_BMC_PASSWORD}
  nodes:
    - {name: node-i, protocol: ipmi, address: 10.0.0.1}
    - {name: node-r, protocol: redfish, address: bmc.example}
fenceDevices:
  - {name: pdu, agent: `+testAgent(t, "fence_fake")+`, options: {ip: 192.0.2.10, username: fencer, behavior: "on"}}
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := cfg.BMC("node-i"); b.Timeout != 0 || b.Retries != nil || b.Port != 0 {
		t.Fatalf("the loader applied defaults it does not own: %+v", b)
	}
	inv, err := NewInventory(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inv.Close() })

	i, _ := inv.BMC("node-i")
	o := i.(*IPMI).opts
	if o.Timeout != 5*time.Second || o.Retries != 2 || o.Port != 623 || o.CipherSuite != 3 || o.PrivilegeLevel != "administrator" {
		t.Errorf("IPMI driver options %+v, want 5s, 2 retries, port 623, suite 3, administrator", o)
	}
	r, _ := inv.BMC("node-r")
	if d := r.(*Redfish); d.timeout != 5*time.Second || d.retries != 2 || d.basic || d.endpoint != "https://bmc.example:443" {
		t.Errorf("Redfish driver: timeout %s, retries %d, basic %v, endpoint %s; want 5s, 2, session, https://bmc.example:443",
			d.timeout, d.retries, d.basic, d.endpoint)
	}
	if d := cfg.Devices["pdu"]; d.Timeout != 0 {
		t.Errorf("fenceDevices[pdu].timeout loaded as %s, want unset", d.Timeout)
	}
	if got := inv.agents["pdu"].opts.Timeout; got != 60*time.Second {
		t.Errorf("fence agent timeout %s, want 60s", got)
	}
	for node, want := range map[string]string{"node-i": "ipmi://10.0.0.1:623", "node-r": "https://bmc.example:443"} {
		if got, _ := inv.Endpoint(node); got != want {
			t.Errorf("Endpoint(%s) = %s, want %s", node, got, want)
		}
	}
}
