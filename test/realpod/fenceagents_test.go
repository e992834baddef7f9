package realpod

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/pkg/vocab"
)

// pduMonitorInterval: the fencer checks its fence devices this often, so
// that the PDU is seen answering before the power is cut.
const pduMonitorInterval = 10 * time.Second

// TestFenceAgentsImageFencesThroughPDU runs the fence-agents image (make
// image-fence-agents) as the chart's fencer pod on the real node, with
// the fencing topology [bmc], [pdu-a]: the hollow machines are fed by a
// switched PDU (pdusim, net-snmp's snmpd) that the fencer reaches only
// through ClusterLabs' fence_apc_snmp, which runs inside the pod — its
// python3, its snmpget — as the pod runs: no capabilities, read-only root.
// When a machine's feed is cut its BMC goes dark with it; the BMC level
// cannot answer, and the fencer taints the Node on the PDU level's
// reading, with the evidence naming that level and the outlet.
func TestFenceAgentsImageFencesThroughPDU(t *testing.T) {
	if testing.Short() {
		t.Skip(harness.SkipShortMessage)
	}
	helm, kubectl := tools(t)
	values, ring := readmeValues(t, helm)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"node-a", "node-b"},
		Feeds:    1,
		Fencing: &harness.Fencing{
			ClusterName:     ring.ClusterName,
			GossipPort:      ring.Gossip.Port,
			Topology:        "{defaults: [[bmc], [pdu-a]]}",
			MonitorInterval: pduMonitorInterval,
		},
	})
	node := startRealNode(ctx, t, h)
	// The README's values with the harness's fencer configuration — BMC
	// inventory, the PDU as a fence_apc_snmp device, the topology — its
	// secret files in the credentials Secret; live from the start.
	fencers := prepareReadmeInstall(ctx, t, h, values)
	goLive(fencers)
	setLabel(ctx, t, h, node.Name, fencerLabel, "true")
	install(t, helm, kubectl, h, values)
	fencer := waitPodReady(ctx, t, h, "fencer", node)
	requireHardened(t, fencer)
	t.Logf("fencer pod %s (image %s) Ready on %s", fencer.Name, fencer.Spec.Containers[0].Image, node.Name)

	// The fencer's monitor has run fence_apc_snmp in the pod: the PDU answers.
	alive := fmt.Sprintf(`fenced_members{state="alive"} %d`, len(h.Machines)+1)
	waitMetrics(ctx, t, "the fencer pod", func() (string, error) { return harness.Scrape(node.Host.Addr) }, alive)
	waitMetrics(ctx, t, "the fencer pod", func() (string, error) { return harness.Scrape(node.Host.Addr) }, `fenced_fence_device_up{device="pdu-a"} 1`)

	victim := h.Machine("node-b")
	t.Cleanup(func() { _ = victim.RestoreFeeds() })
	outlets := victim.Outlets()
	if len(outlets) != 1 {
		t.Fatalf("%s has outlets %v, want one on pdu-a", victim.Name, outlets)
	}
	cut := time.Now()
	if err := victim.CutFeeds(); err != nil {
		t.Fatal(err)
	}
	ev := waitTainted(ctx, t, h, victim.Name)
	wantPlug := outlets[0].PDU + ":" + strconv.Itoa(outlets[0].Number)
	if ev.Method != vocab.EvidenceBMCPowerOff || !strings.Contains(ev.By, node.Name) || ev.BMC == nil || ev.BMC.Level != 2 ||
		len(ev.BMC.Plugs) != 1 || ev.BMC.Plugs[0].Device+":"+ev.BMC.Plugs[0].Plug != wantPlug || ev.BMC.Plugs[0].Power != vocab.PowerOff {
		t.Fatalf("evidence %+v: want power off read by the fencer on %s at level 2, outlet %s", ev, node.Name, wantPlug)
	}
	logs, err := node.ContainerLog(fencer, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s's feed cut, its BMC dark with it; tainted %s later by %q on level %d: %s read %s at %s; the fencer's log:\n%s",
		victim.Name, time.Since(cut).Round(100*time.Millisecond), ev.By, ev.BMC.Level, wantPlug, ev.BMC.Plugs[0].Power,
		ev.BMC.Plugs[0].At.Format(time.RFC3339Nano), cluster.LastLines(logs, 15))
}
