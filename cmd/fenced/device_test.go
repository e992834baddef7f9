package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/internal/testbed/pdusim"
)

// topologyFor writes a configuration with node-a's BMC first and two PDU
// outlets (one on each of two PDUs) second, and node-b behind a PDU that
// does not answer (another community).
func topologyFor(t *testing.T, sim *ipmisim.Sim, a, b *pdusim.PDU) string {
	t.Helper()
	dir := t.TempDir()
	pw := writeFile(t, dir, "bmc.pw", sim.Password+"\n")
	commA := writeFile(t, dir, "a.community", a.Community+"\n")
	commB := writeFile(t, dir, "b.community", b.Community+"\n")
	wrong := writeFile(t, dir, "wrong.community", "not-the-community\n")
	return writeFile(t, dir, "config.yaml", fmt.Sprintf(`apiVersion: fenced.io/v1alpha1
kind: FencedConfiguration
bmc:
  defaults: {protocol: ipmi, timeout: 1s, retries: 1}
  nodes:
    - {name: node-a, address: %s, port: %d, username: %s, passwordFile: %s}
fenceDevices:
  - name: pdu-a
    agent: fence_apc_snmp
    options: {ip: %s, ipport: "%d", snmp_version: "2c"}
    secretOptions: {community: %s}
    plugs: {node-a: "1", node-b: "2"}
  - name: pdu-b
    agent: fence_apc_snmp
    options: {ip: %s, ipport: "%d", snmp_version: "2c"}
    secretOptions: {community: %s}
    plugs: {node-a: "1"}
  - name: pdu-dark
    agent: fence_apc_snmp
    options: {ip: %s, ipport: "%d", snmp_version: "2c", shell_timeout: "1", retry_on: "1"}
    secretOptions: {community: %s}
    timeout: 20s
    plugs: {node-b: "3"}
topology:
  nodes:
    - {name: node-a, levels: [[bmc], [pdu-a, pdu-b]]}
    - {name: node-b, levels: [[pdu-dark]]}
`, sim.Addr, sim.Port, sim.Username, pw, a.Host, a.Port, commA, b.Host, b.Port, commB, b.Host, b.Port, wrong))
}

// TestDeviceAndTopologyCommands runs `fenced device` and `fenced topology
// check` against a real BMC (ipmi_sim) and real PDUs (snmpd) through
// ClusterLabs' fence_apc_snmp.
func TestDeviceAndTopologyCommands(t *testing.T) {
	sim, _ := startNodeASim(t)
	pa := pdusim.Start(t, pdusim.Options{Name: "pdu-a", Outlets: 4})
	pb := pdusim.Start(t, pdusim.Options{Name: "pdu-b", Outlets: 4})
	cfg := topologyFor(t, sim, pa, pb)
	ctx := context.Background()

	code, out, errOut := fenced(t, ctx, "device", "status", "node-a", "--config", cfg, "-o", "json")
	var res deviceResult
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("status: code %d, out %q, stderr %q", code, out, errOut)
	}
	if len(res.Plugs) != 3 || res.Decision != "power on (level 1, the BMC decides)" {
		t.Fatalf("status read %d plugs, decision %q; want all 3, the BMC deciding", len(res.Plugs), res.Decision)
	}
	if !strings.Contains(errOut, "node-a: level 2: power-status pdu-a:1, pdu-b:1") {
		t.Errorf("no progress line on stderr: %q", errOut)
	}

	// Level 2 alone: one feed off is still on; switching the level off
	// switches both outlets.
	pa.SetOutlet(1, false)
	code, out, _ = fenced(t, ctx, "device", "status", "node-a", "--level", "2", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "node-a: power on (level 2 decides)") {
		t.Fatalf("one feed off: code %d, out:\n%s", code, out)
	}
	// Without a terminal and without --yes: nothing is switched.
	code, _, errOut = fenced(t, ctx, "device", "off", "node-a", "--level", "2", "--config", cfg)
	if code != exitUsage || !strings.Contains(errOut, "pass --yes") || !pb.Outlet(1) {
		t.Fatalf("off without --yes: code %d, outlet %v, stderr %q", code, pb.Outlet(1), errOut)
	}
	code, out, errOut = fenced(t, ctx, "device", "off", "node-a", "--level", "2", "--power-wait", "100ms", "--config", cfg,
		"--yes", "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if code != exitOK || !strings.Contains(out, "node-a: power-off done on level 2") || pa.Outlet(1) || pb.Outlet(1) {
		t.Fatalf("off --level 2: code %d, outlets %v %v, out:\n%s\nstderr: %s", code, pa.Outlet(1), pb.Outlet(1), out, errOut)
	}

	// node-b's only device does not answer (wrong community): status
	// fails, and topology check says node-b cannot be fenced.
	code, out, _ = fenced(t, ctx, "device", "status", "node-b", "--config", cfg)
	if code != exitCannotCheck || !strings.Contains(out, "no level could be read: level 1: pdu-dark:3") {
		t.Fatalf("dark PDU: code %d, out:\n%s", code, out)
	}
	code, out, _ = fenced(t, ctx, "topology", "check", "--config", cfg)
	if code != exitFailure {
		t.Fatalf("topology check with a dark PDU: code %d, want %d; out:\n%s", code, exitFailure, out)
	}
	for _, want := range []string{"node-a  1      power on", "node-a  2      power off", "node-b  1      CANNOT READ",
		"node-b: no fencing level answers: it cannot be fenced automatically now"} {
		if !strings.Contains(out, want) {
			t.Errorf("topology check output lacks %q:\n%s", want, out)
		}
	}
	code, _, _ = fenced(t, ctx, "topology", "check", "node-a", "--config", cfg)
	if code != exitOK {
		t.Errorf("topology check node-a: code %d, want %d", code, exitOK)
	}
	code, _, errOut = fenced(t, ctx, "device", "status", "node-z", "--config", cfg)
	if code != exitUsage || !strings.Contains(errOut, `unknown node "node-z": it has no power device`) {
		t.Errorf("unknown node: code %d, stderr %q", code, errOut)
	}
}
