package device

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/internal/testbed/pdusim"
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
		got := make([]vocab.PowerState, len(names))
		var wg sync.WaitGroup
		for i, name := range names {
			wg.Go(func() {
				s, err := a.Plug(name, strconv.Itoa(i+1)).PowerState(ctx)
				if err != nil {
					t.Errorf("%s: %v", name, err)
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
