package device

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/internal/testbed/pdusim"
	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/vocab"
)

// apcAgent builds the driver on ClusterLabs' fence_apc_snmp for the PDU.
func apcAgent(t *testing.T, pdu *pdusim.PDU, community string) *FenceAgent {
	t.Helper()
	a, err := NewFenceAgent(context.Background(), FenceAgentOptions{
		DriverOptions: DriverOptions{Node: "pdu", Timeout: 30 * time.Second},
		Agent:         "fence_apc_snmp",
		Options:       map[string]string{"ip": pdu.Host, "ipport": strconv.Itoa(pdu.Port), "snmp_version": "2c"},
		Secrets:       map[string]func() (string, error){"community": staticPassword(community)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestFenceAgentAPCSNMP(t *testing.T) {
	requireIntegration(t)
	pdu := pdusim.Start(t, pdusim.Options{Outlets: 4, Off: []int{2}, Names: []string{"worker-1", "worker-2"}})
	a := apcAgent(t, pdu, pdu.Community)
	ctx := context.Background()

	for _, tc := range []struct {
		plug string
		want vocab.PowerState
	}{
		{"1", vocab.PowerOn},
		{"2", vocab.PowerOff},
		{"worker-2", vocab.PowerOff}, // by outlet name
	} {
		if got, err := a.Status(ctx, tc.plug); got != tc.want || err != nil {
			t.Fatalf("Status(%s) = %s, %v; want %s", tc.plug, got, err, tc.want)
		}
	}
	if err := a.Monitor(ctx); err != nil {
		t.Fatalf("Monitor: %v", err)
	}
	plugs, err := a.List(ctx)
	want := []FencePlug{{"1", "worker-1"}, {"2", "worker-2"}, {"3", "outlet-3"}, {"4", "outlet-4"}}
	if err != nil || fmt.Sprint(plugs) != fmt.Sprint(want) {
		t.Fatalf("List = %v, %v; want %v", plugs, err, want)
	}

	// Through the BMC-shaped handle and the verified actions the fencer uses.
	plug := a.Plug("worker-3", "3")
	if _, err := PowerOffVerified(ctx, plug, fastVerify); err != nil {
		t.Fatalf("PowerOffVerified: %v", err)
	}
	if pdu.Outlet(3) {
		t.Fatal("outlet 3 on after PowerOffVerified")
	}
	if _, err := PowerOnVerified(ctx, plug, fastVerify); err != nil {
		t.Fatalf("PowerOnVerified: %v", err)
	}
	if !pdu.Outlet(3) {
		t.Fatal("outlet 3 off after PowerOnVerified")
	}
	// A change at the PDU is what the agent reads next.
	pdu.SetOutlet(3, false)
	if got, err := plug.PowerState(ctx); got != vocab.PowerOff || err != nil {
		t.Fatalf("PowerState after the outlet was cut = %s, %v", got, err)
	}
}

func TestFenceAgentAPCSNMPWrongCommunity(t *testing.T) {
	requireIntegration(t)
	pdu := pdusim.Start(t, pdusim.Options{Outlets: 2, Off: []int{1, 2}})
	a := apcAgent(t, pdu, "not-"+pdu.Community)
	got, err := a.Plug("worker-1", "1").PowerState(context.Background())
	// SNMP v2c has no authentication failure answer: the agent hears nothing.
	if got != vocab.PowerUnknown || KindOf(err) != vocab.KindTimeout {
		t.Fatalf("wrong community: %s, %v; want unknown and a timeout", got, err)
	}
	if msg := err.Error(); strings.Contains(msg, pdu.Community) {
		t.Fatalf("error leaks the community: %s", msg)
	}
	if err := a.Monitor(context.Background()); err == nil {
		t.Fatal("Monitor with a wrong community succeeded")
	}
}

func TestFenceAgentIPMILan(t *testing.T) {
	requireIntegration(t)
	sim := ipmisim.Start(t, ipmisim.Options{})
	newAgent := func(password string) *FenceAgent {
		a, err := NewFenceAgent(context.Background(), FenceAgentOptions{
			DriverOptions: DriverOptions{Node: "node-a", Timeout: 30 * time.Second},
			Agent:         "fence_ipmilan",
			Options: map[string]string{"ip": sim.Addr, "ipport": strconv.Itoa(sim.Port), "username": sim.Username,
				"lanplus": "1", "cipher": "3", "privlvl": "administrator"},
			Secrets: map[string]func() (string, error){"password": staticPassword(password)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	b := newAgent(sim.Password).Plug("node-a", "")
	ctx := context.Background()
	assertState(t, sim, b, vocab.PowerOn)
	if _, err := PowerOffVerified(ctx, b, fastVerify); err != nil {
		t.Fatalf("PowerOffVerified: %v", err)
	}
	assertState(t, sim, b, vocab.PowerOff)
	if _, err := PowerOnVerified(ctx, b, fastVerify); err != nil {
		t.Fatalf("PowerOnVerified: %v", err)
	}
	assertState(t, sim, b, vocab.PowerOn)

	got, err := newAgent("wrong-"+sim.Password).Plug("node-a", "").PowerState(ctx)
	if got != vocab.PowerUnknown || err == nil {
		t.Fatalf("wrong password: %s, %v; want an error", got, err)
	}
	t.Logf("wrong password: %v (kind %s)", err, KindOf(err))
}

// TestFenceAgentAPCSNMPSharedStatus: fence_apc_snmp's list-status prints
// no states, so a rack's outlets read at once through it are read one by
// one, each with its own state, dark or not. And the reason fenced never
// asks an agent for a plug list: fence_apc_snmp reads the first plug's
// outlet for all of them.
func TestFenceAgentAPCSNMPSharedStatus(t *testing.T) {
	requireIntegration(t)
	names := []string{"worker-1", "worker-2", "worker-3", "worker-4", "worker-5", "worker-6", "worker-7", "worker-8"}
	pdu := pdusim.Start(t, pdusim.Options{Outlets: len(names), Off: []int{2, 5, 8}, Names: names})
	a := apcAgent(t, pdu, pdu.Community)
	a.snmp = nil // the agent's own reads, as of a PDU fenced does not read itself (apcsnmp.go)
	ctx := context.Background()
	if listed, err := a.listStatus(ctx); err != nil || len(listed) != 0 {
		t.Errorf("list-status: %v, %v; fence_apc_snmp printed states?", listed, err)
	}
	if got, _ := a.Status(ctx, "2,3"); got != vocab.PowerOff {
		t.Logf("status of plugs 2,3 (3 on): %s — fence_apc_snmp reads plug lists right now?", got)
	}

	for round, cut := range [][]int{nil, {1, 3, 4, 6, 7}} {
		for _, i := range cut {
			pdu.SetOutlet(i, false)
		}
		readAtOnce(t, a, pdu, names, round)
	}
}

// readAtOnce reads the outlet of every node of names (outlet i+1 for
// names[i]) at once, as a rack's reads come, and checks each against the
// PDU.
func readAtOnce(t *testing.T, a *FenceAgent, pdu *pdusim.PDU, names []string, round int) {
	t.Helper()
	got := make([]vocab.PowerState, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			s, err := a.Plug(name, strconv.Itoa(i+1)).PowerState(context.Background())
			if err != nil {
				t.Errorf("round %d, %s: %v", round, name, err)
			}
			got[i] = s
		})
	}
	wg.Wait()
	for i := range names {
		want := vocab.PowerState(vocab.PowerOn)
		if !pdu.Outlet(i + 1) {
			want = vocab.PowerOff
		}
		if got[i] != want {
			t.Errorf("round %d: outlet %d read at once with the others: %s, want %s", round, i+1, got[i], want)
		}
	}
}

// TestFenceAgentAPCSNMPOutletItLacks: fence_apc_snmp reads outlet 9 of a
// 4-outlet PDU as off; through fenced's plug handle that is an error of
// kind no-such-plug, never an off reading.
func TestFenceAgentAPCSNMPOutletItLacks(t *testing.T) {
	requireIntegration(t)
	pdu := pdusim.Start(t, pdusim.Options{Outlets: 4, Names: []string{"worker-1", "worker-2", "worker-3", "worker-4"}})
	a := apcAgent(t, pdu, pdu.Community)
	ctx := context.Background()
	if got, err := a.Status(ctx, "9"); got != vocab.PowerOff || err != nil {
		t.Logf("the agent's own status of outlet 9: %s, %v (no longer off: the agent was fixed)", got, err)
	}
	got, err := a.Plug("worker-9", "9").PowerState(ctx)
	if got == vocab.PowerOff || KindOf(err) != vocab.KindNoSuchPlug {
		t.Fatalf("outlet 9 through the plug handle: %s, %v; want kind no-such-plug", got, err)
	}
	if got, err := a.Plug("worker-2", "worker-2").PowerState(ctx); got != vocab.PowerOn || err != nil {
		t.Fatalf("outlet worker-2: %s, %v", got, err)
	}
}

// countedAPCAgent is fence_apc_snmp behind a wrapper of the same name that
// records each run's action in the returned file, then runs the real agent.
func countedAPCAgent(t *testing.T, pdu *pdusim.PDU, options map[string]string) (*FenceAgent, string) {
	t.Helper()
	real, err := config.FindFenceAgent("fence_apc_snmp")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "actions")
	wrapper := filepath.Join(dir, "fence_apc_snmp")
	script := "#!/bin/sh\nin=$(cat)\nprintf '%s\\n' \"$in\" | grep '^action=' >> " + log + "\nprintf '%s\\n' \"$in\" | exec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := map[string]string{"ip": pdu.Host, "ipport": strconv.Itoa(pdu.Port)}
	maps.Copy(opts, options)
	a, err := NewFenceAgent(context.Background(), FenceAgentOptions{
		DriverOptions: DriverOptions{Node: "pdu", Timeout: 30 * time.Second},
		Agent:         wrapper,
		Options:       opts,
		Secrets:       map[string]func() (string, error){"community": staticPassword(pdu.Community)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return a, log
}

// agentActions are the actions the counted agent ran, but for its metadata.
func agentActions(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var got []string
	for line := range strings.Lines(string(b)) {
		if a := strings.TrimPrefix(strings.TrimSpace(line), "action="); a != "metadata" {
			got = append(got, a)
		}
	}
	return got
}

// TestAPCRackPDUReadNatively: the outlets of an APC rack PDU that
// fence_apc_snmp would read over SNMP v2c are read by fenced itself — a
// rack of them at once without one run of the agent, each with its own
// state — while a named plug, an outlet the PDU lacks and every power
// action stay the agent's or are refused as the agent's reading would be.
// SNMP v3 and a device of another type are the agent's alone.
func TestAPCRackPDUReadNatively(t *testing.T) {
	requireIntegration(t)
	const outlets = 40
	names := make([]string, outlets)
	for i := range names {
		names[i] = fmt.Sprintf("worker-%d", i+1)
	}
	pdu := pdusim.Start(t, pdusim.Options{Outlets: outlets, Off: []int{2, 5, 33}, Names: names})
	a, log := countedAPCAgent(t, pdu, map[string]string{"snmp_version": "2c"})
	ctx := context.Background()

	readAtOnce(t, a, pdu, names, 0)
	for _, i := range []int{1, 3, 4, 6, 7, 20, 40} {
		pdu.SetOutlet(i, false)
	}
	readAtOnce(t, a, pdu, names, 1)
	// The check of off readings lists the outlets through the agent
	// (plugcheck.go); no status was the agent's.
	if got := slices.DeleteFunc(agentActions(t, log), func(a string) bool { return a == "list" }); len(got) != 0 {
		t.Errorf("the agent ran %v for a rack's status reads, want none", got)
	}

	// An outlet the PDU lacks: no-such-plug, never off (fence_apc_snmp
	// reads it off).
	if got, err := a.Plug("worker-99", "99").PowerState(ctx); got != vocab.PowerUnknown || KindOf(err) != vocab.KindNoSuchPlug {
		t.Errorf("outlet 99 of 40: %s, %v; want unknown, no-such-plug", got, err)
	}
	// A plug by name is the agent's to resolve.
	before := len(agentActions(t, log))
	if got, err := a.Plug("worker-2", "worker-2").PowerState(ctx); got != vocab.PowerOff || err != nil {
		t.Errorf("plug worker-2 by name: %s, %v; want off", got, err)
	}
	if got := agentActions(t, log)[before:]; !slices.Contains(got, "status") {
		t.Errorf("plug by name: the agent ran %v, want its status", got)
	}
	// Power actions are the agent's.
	before = len(agentActions(t, log))
	if err := a.Plug("worker-9", "9").PowerOff(ctx); err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	if got := agentActions(t, log)[before:]; !slices.Contains(got, "off") || pdu.Outlet(9) {
		t.Errorf("power off: the agent ran %v, outlet 9 on: %v", got, pdu.Outlet(9))
	}

	// A wrong community: no answer, a timeout, the community not said.
	wrong, _ := countedAPCAgent(t, pdu, nil)
	if wrong.snmp == nil {
		t.Fatal("no native reader for fence_apc_snmp with a community file")
	}
	wrong.snmp.community = staticPassword("not-" + pdu.Community)
	if got, err := wrong.Plug("worker-1", "1").PowerState(ctx); got != vocab.PowerUnknown || KindOf(err) != vocab.KindTimeout ||
		strings.Contains(err.Error(), pdu.Community) {
		t.Errorf("wrong community: %s, %v; want unknown and a timeout that does not say the community", got, err)
	}
}

// TestAPCNativeOnlyWhereTheAgentReadsTheSame: the native reader is built
// only for fence_apc_snmp over SNMP v1 or v2c with a community file, and
// read only outlet numbers.
func TestAPCNativeOnlyWhereTheAgentReadsTheSame(t *testing.T) {
	community := map[string]func() (string, error){"community": staticPassword("c")}
	for _, tc := range []struct {
		name    string
		agent   string
		opts    map[string]string
		secrets map[string]func() (string, error)
		want    bool
	}{
		{"v2c by default", "fence_apc_snmp", map[string]string{"ip": "198.18.0.1"}, community, true},
		{"v1", "fence_apc_snmp", map[string]string{"ip": "198.18.0.1", "snmp_version": "1"}, community, true},
		{"v3", "fence_apc_snmp", map[string]string{"ip": "198.18.0.1", "snmp_version": "3", "username": "u"}, community, false},
		{"a v3 user with no version", "fence_apc_snmp", map[string]string{"ip": "198.18.0.1", "username": "u"}, community, false},
		{"a privacy password", "fence_apc_snmp", map[string]string{"ip": "198.18.0.1"},
			map[string]func() (string, error){"community": staticPassword("c"), "snmp_priv_passwd": staticPassword("p")}, false},
		{"no community", "fence_apc_snmp", map[string]string{"ip": "198.18.0.1"}, nil, false},
		{"ipaddr, not ip", "fence_apc_snmp", map[string]string{"ipaddr": "198.18.0.1"}, community, false},
		{"a bad port", "fence_apc_snmp", map[string]string{"ip": "198.18.0.1", "ipport": "x"}, community, false},
		{"another agent", "fence_eaton_snmp", map[string]string{"ip": "198.18.0.1"}, community, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newAPCSNMP(tc.agent, tc.opts, tc.secrets) != nil; got != tc.want {
				t.Errorf("native reader: %v, want %v", got, tc.want)
			}
		})
	}
	for plug, want := range map[string]int{"1": 1, "40": 40, "0": 0, "-1": 0, "01": 0, "worker-1": 0, "2,3": 0, "": 0} {
		if got := outlet(plug); got != want {
			t.Errorf("outlet(%q) = %d, want %d", plug, got, want)
		}
	}
}
