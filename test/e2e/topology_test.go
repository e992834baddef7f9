package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// Fencing topology on the harness: machines fed by switched
// PDUs that ClusterLabs' fence_apc_snmp reads over SNMP, BMCs that go dark
// with their machine's feed, fence_ipmilan beside the native IPMI driver.
// Two harnesses: one in confirm-only mode for the readings, one in
// power-off mode for the switching.

// topologyMonitorInterval is the fencers' device monitoring interval here:
// the shortest the configuration accepts, so the monitoring scenario sees a
// round within seconds.
const topologyMonitorInterval = 10 * time.Second

// monitorTimeout bounds the waits for the device monitor to notice a
// change. The monitor promises a schedule, not a latency: a change is seen
// by the first round that starts after it, and the next round starts one
// interval (±10 %) after the previous one ended. So the round under way
// when the change happens (every device, then the levels of every Ready
// node, 4 at a time, each fence agent call up to its 20 s timeout — a
// wrong community makes every pdu-a call wait for it), the pause, and the
// next round's device checks all count; on an idle machine that is ~10 s,
// on a loaded one the Python fence agents alone take seconds a call. It
// stays below the default monitorInterval (5m): a fencer that ignored the
// configured interval would still fail.
const monitorTimeout = 2*topologyMonitorInterval + podTimeout

// topologyMachines are TestTopologyConfirmOnly's machines, in the order
// that gives machine i outlet i+1 of each PDU.
var topologyMachines = []string{"cp-1", "w-1", "w-2", "w-3", "w-4", "w-5", "w-6"}

// TestTopologyConfirmOnly runs one fencer with dual PDU feeds per machine
// and the levels [bmc], [pdu-a, pdu-b] for most nodes; w-4 has only
// fence_ipmilan, w-5 a mislabelled outlet (w-6's), w-6 only its BMC.
func TestTopologyConfirmOnly(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: topologyMachines,
		Feeds:    2,
		// NotReady within seconds of a partition, not 50 (the mislabelled
		// outlet waits for it).
		Cluster: cluster.Options{ControllerManagerArgs: []string{"--node-monitor-grace-period=20s"}},
		Fencing: &harness.Fencing{
			Fencers: []string{"cp-1"},
			Topology: `{defaults: [[bmc], [pdu-a, pdu-b]], nodes: [` +
				`{name: w-4, levels: [[` + harness.IPMILanDevice("w-4") + `]]}, ` +
				`{name: w-5, levels: [[pdu-a]]}, {name: w-6, levels: [[bmc]]}]}`,
			IPMILanDevices:  true,
			PDUPlugs:        map[string]map[string]string{"pdu-a": mislabelled(t, "w-5", "w-6")},
			MonitorInterval: topologyMonitorInterval,
		},
	})
	cp := h.Machine("cp-1")
	// Every device answered the monitor's first round before any fault.
	for _, dev := range []string{"pdu-a", "pdu-b", harness.IPMILanDevice("w-4")} {
		waitMetric(t, cp, fmt.Sprintf(`fenced_fence_device_up{device=%q} 1`, dev), monitorTimeout)
	}

	t.Run("parallel", func(t *testing.T) {
		t.Run("power feed lost, BMC dark: tainted on the PDU level, workload moves, feeds back: taint removed", func(t *testing.T) {
			t.Parallel()
			feedLossFencedAndRecovered(ctx, t, h, "w-1", "w-2")
		})
		t.Run("dual feed: one outlet cut changes nothing, both cut: tainted", func(t *testing.T) {
			t.Parallel()
			m := h.Machine("w-3")
			t.Cleanup(func() { _ = m.RestoreFeeds() })
			bootBefore := m.BootID()
			must(t, m.CutFeed(0))
			if !m.Powered() {
				t.Fatal("one feed of two cut: the machine has no power")
			}
			requireNoTaintFor(ctx, t, h, m.Name, 15*time.Second)
			must(t, h.WaitNodeReady(ctx, m.Name, time.Second))
			waitPower(t, m, "on")
			if m.BootID() != bootBefore {
				t.Fatal("one feed of two cut: the machine rebooted")
			}
			if v := metricValue(t, cp, `fenced_bmc_requests_total{op="power-off",result="ok"}`); v != 0 {
				t.Fatalf("%v power-off requests in confirm-only mode", v)
			}
			must(t, m.CutFeed(1))
			n := waitTaint(ctx, t, h, m.Name, true)
			ev := requireLevelEvidence(t, n, 2, bootBefore, plugsOf(m))
			t.Logf("evidence: level %d, plugs %v", ev.BMC.Level, plugNames(ev.BMC.Plugs))
			must(t, m.RestoreFeeds())
			must(t, h.WaitNodeReady(ctx, m.Name, podTimeout))
			waitTaint(ctx, t, h, m.Name, false)
		})
		t.Run("fence_ipmilan as the only level: the same power loss, the same result", func(t *testing.T) {
			t.Parallel()
			victim, spare := "w-4", "w-2"
			sts, oldPodUID := startWorkload(ctx, t, h, "ipmilan", victim, spare)
			m := h.Machine(victim)
			waitWriter(t, h, sts.PV, victim, 3)
			bootBefore := m.BootID()
			// The BMC stays up: ipmi_sim reads the machine off, through
			// ClusterLabs' agent this time.
			must(t, m.PowerLoss())
			n := waitTaint(ctx, t, h, victim, true)
			requireLevelEvidence(t, n, 1, bootBefore, []string{harness.IPMILanDevice(victim) + ":" + victim})
			requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
			requireSafe(t, h, sts.PV)
			waitPower(t, m, "off") // cross-check against ipmi_sim with ipmitool
			must(t, m.PowerOnViaBMC())
			must(t, h.WaitNodeReady(ctx, victim, podTimeout))
			waitTaint(ctx, t, h, victim, false)
			requireSafe(t, h, sts.PV)
		})
		t.Run("mislabelled outlet: the live node is not tainted, the contradiction is an alarm", func(t *testing.T) {
			t.Parallel()
			// w-5's only level is pdu-a's outlet of w-6.
			a, b := h.Machine("w-5"), h.Machine("w-6")
			must(t, a.PartitionFromAPI())
			t.Cleanup(func() { _ = a.Heal() })
			must(t, b.CutFeeds())
			t.Cleanup(func() { _ = b.RestoreFeeds() })
			must(t, h.WaitNodeNotReady(ctx, a.Name, notReadyTimeout))
			// Whichever comes first: the alarm, or (the bug this guards
			// against) a taint on the reading of w-6's outlet.
			alarmOrTaint(ctx, t, h, a.Name)
			requireNoTaintFor(ctx, t, h, a.Name, 15*time.Second)
			// w-6's only level, its BMC, is dark with its feeds: no evidence.
			requireNoTaintFor(ctx, t, h, b.Name, time.Second)
			if v := metricValue(t, cp, `fenced_safety_alarms_total{reason="`+string(vocab.EventPowerReadingContradicted)+`"}`); v < 1 {
				t.Fatalf("fenced_safety_alarms_total{reason=%q} is %v", vocab.EventPowerReadingContradicted, v)
			}
			must(t, a.Heal())
			must(t, h.WaitNodeReady(ctx, a.Name, podTimeout))
			requireNoTaintFor(ctx, t, h, a.Name, time.Second)
			// Feeds back: the BMC answers before the machine has booted
			// and truly reads off, which may taint w-6 for the seconds of
			// its boot; its new boot removes any taint.
			must(t, b.RestoreFeeds())
			must(t, h.WaitNodeReady(ctx, b.Name, podTimeout))
			waitTaint(ctx, t, h, b.Name, false)
		})
	})

	t.Run("PDU unreachable and BMC dark: no taint, each level says why; PDU back: tainted", func(t *testing.T) {
		m, pduB := h.Machine("w-3"), h.PDU("pdu-b")
		must(t, pduB.Freeze())
		t.Cleanup(func() { _ = pduB.Thaw() })
		must(t, m.CutFeeds())
		t.Cleanup(func() { _ = m.RestoreFeeds() })
		ev, err := h.WaitEvent(ctx, "default", m.Name, vocab.EventCannotConfirmPowerState, "level 2", podTimeout)
		must(t, err)
		t.Logf("event: %s", ev.Message)
		for _, want := range []string{"level 1", "level 2", "pdu-b"} {
			if !strings.Contains(ev.Message, want) {
				t.Errorf("CannotConfirmPowerState does not name %q: %s", want, ev.Message)
			}
		}
		requireNoTaintFor(ctx, t, h, m.Name, 20*time.Second)
		// pdu-a alone reads off: half a level is no evidence. Once pdu-b
		// answers too, the level decides.
		must(t, pduB.Thaw())
		waitTaint(ctx, t, h, m.Name, true)
		must(t, m.RestoreFeeds())
		must(t, h.WaitNodeReady(ctx, m.Name, podTimeout))
		waitTaint(ctx, t, h, m.Name, false)
	})

	t.Run("device monitoring: wrong community, device down and the node cannot be fenced, no outage", func(t *testing.T) {
		pduA := h.PDU("pdu-a")
		good, err := os.ReadFile(pduA.CommunityFile)
		must(t, err)
		t.Cleanup(func() { _ = os.WriteFile(pduA.CommunityFile, good, 0o600) })
		// A rotation on the PDU nobody told fenced about: the fencers
		// read the secret file for every call.
		t0 := time.Now()
		must(t, os.WriteFile(pduA.CommunityFile, []byte("not-"+pduA.Community+"\n"), 0o600))
		waitMetric(t, cp, `fenced_fence_device_up{device="pdu-a"} 0`, monitorTimeout)
		t.Logf("fenced_fence_device_up{device=\"pdu-a\"} 0 after %.1fs (monitor interval %s)", time.Since(t0).Seconds(), topologyMonitorInterval)
		// w-5's only level is on pdu-a; the others still have their BMC.
		ev, err := h.WaitEvent(ctx, "default", "w-5", vocab.EventCannotBeFencedAutomatically, "pdu-a", monitorTimeout)
		must(t, err)
		t.Logf("after %.1fs: %s", time.Since(t0).Seconds(), ev.Message)
		// The round that sent the Event set the levels before it: a check
		// of the present (waitMetric always looks once).
		waitMetric(t, cp, `fenced_node_fence_levels_ready{node="w-5"} 0`, time.Second)
		waitMetric(t, cp, `fenced_node_fence_levels_ready{node="w-1"} 1`, time.Second)
		requireNoOutage(ctx, t, h, 5*time.Second)
		// The right community back: the node can be fenced again.
		must(t, os.WriteFile(pduA.CommunityFile, good, 0o600))
		waitMetric(t, cp, `fenced_fence_device_up{device="pdu-a"} 1`, monitorTimeout)
		_, err = h.WaitEvent(ctx, "default", "w-5", vocab.EventFenceDevicesAnswer, "", monitorTimeout)
		must(t, err)
	})

	// Last: the forged dead of w-5 cannot be refuted for the rest of the
	// harness's life.
	t.Run("mislabelled outlet of a Ready node: an alarm before any outage, and a forced gossip death taints nothing", func(t *testing.T) {
		a, b := h.Machine("w-5"), h.Machine("w-6")
		must(t, h.WaitNodeReady(ctx, a.Name, podTimeout))
		contradicted := `fenced_safety_alarms_total{reason="` + string(vocab.EventPowerReadingContradicted) + `"}`
		before := metricValue(t, cp, contradicted)
		// w-6 off: w-5's only level, w-6's outlet, reads off while w-5 runs.
		must(t, b.CutFeeds())
		t.Cleanup(func() { _ = b.RestoreFeeds() })
		t0 := time.Now()
		ev, err := h.WaitEvent(ctx, "default", a.Name, vocab.EventPowerDeviceReadsOffLiveNode, "", monitorTimeout)
		must(t, err)
		t.Logf("device monitor after %.1fs: %s", time.Since(t0).Seconds(), ev.Message)

		// One dead at memberlist's top incarnation, as a compromised worker
		// (or a false suspicion) gives it: the fencer reads w-5's level.
		f := forgerOn(t, h)
		must(t, f.Dead(cp.Host.Addr.String()+":"+strconv.Itoa(harness.GossipPort), a.Name, ^uint32(0), "cp-1"))
		poll.Until(t, podTimeout, fmt.Sprintf("%s grows past %v (and %s is never tainted meanwhile)", contradicted, before, a.Name), func() bool {
			if n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, a.Name, metav1.GetOptions{}); err == nil && taint.HasTaint(n) {
				t.Fatalf("Ready node %s tainted on a mislabelled outlet's reading after a forged gossip death: %s", a.Name, n.Annotations[taint.AnnotationEvidence])
			}
			text, err := cp.Metrics() // a scrape the loaded machine did not answer is asked again
			if err != nil {
				return false
			}
			v, err := seriesValue(text, contradicted)
			must(t, err)
			return v > before
		})
		t.Logf("the forged death's reading contradicted after %.1fs", time.Since(t0).Seconds())
		requireNoTaintFor(ctx, t, h, a.Name, 15*time.Second)
		must(t, h.WaitNodeReady(ctx, a.Name, time.Second))
		must(t, b.RestoreFeeds())
		must(t, h.WaitNodeReady(ctx, b.Name, podTimeout))
		waitTaint(ctx, t, h, b.Name, false)
	})
}

// TestTopologyPowerOff: in power-off mode a hung node whose BMC is dark is
// switched off at its PDU outlet by fence_apc_snmp.
func TestTopologyPowerOff(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3"},
		Feeds:    1,
		// Power-off waits for NotReady: seconds after the hang, not 50.
		Cluster: cluster.Options{ControllerManagerArgs: []string{"--node-monitor-grace-period=20s"}},
		Fencing: &harness.Fencing{
			Fencers:  []string{"cp-1"},
			Policy:   `{mode: power-off, fenceAfter: 5s, maxUnhealthy: "50%"}`,
			Topology: `{defaults: [[bmc], [pdu-a]]}`,
		},
	})
	cp := h.Machine("cp-1")
	victim, spare := "w-1", "w-2"
	m := h.Machine(victim)
	outlet := m.Outlets()[0]
	sts, oldPodUID := startWorkload(ctx, t, h, "pdu-power-off", victim, spare)
	waitWriter(t, h, sts.PV, victim, 3)
	bootBefore := m.BootID()
	hungBoot, err := m.ProcessGroup()
	must(t, err)
	m.BMCDown()
	t.Cleanup(m.BMCUp)
	must(t, m.Hang())
	t.Cleanup(func() { _ = m.Resume() })

	n := waitTaint(ctx, t, h, victim, true)
	ev := requireLevelEvidence(t, n, 2, bootBefore, plugsOf(m))
	if !ev.BMC.PoweredOffByFenced {
		t.Fatalf("evidence %+v: not powered off by fenced", ev.BMC)
	}
	if h.PDU(outlet.PDU).Outlet(outlet.Number) || m.Powered() {
		t.Fatalf("tainted, but outlet %d of %s is on", outlet.Number, outlet.PDU)
	}
	if v := metricValue(t, cp, `fenced_bmc_requests_total{op="power-off",result="ok"}`); v != 1 {
		t.Fatalf("%v successful power-off requests, want 1 (the PDU's)", v)
	}
	requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
	// The hung writer dies with its feed: it can never resume.
	requireBootGone(t, m, hungBoot)
	requireSafe(t, h, sts.PV)

	// afterFence is off: the node stays off until someone switches its
	// outlet on; then the BMC answers, "restore last state" boots it, and
	// the taint goes.
	must(t, m.RestoreFeeds())
	must(t, h.WaitNodeReady(ctx, victim, podTimeout))
	waitTaint(ctx, t, h, victim, false)
	if m.BootID() == bootBefore {
		t.Fatal("the node came back with the same boot ID")
	}
	requireSafe(t, h, sts.PV)
}

// feedLossFencedAndRecovered cuts every feed of victim, whose workload
// must move to spare on the PDU level's evidence, then restores them.
func feedLossFencedAndRecovered(ctx context.Context, t *testing.T, h *harness.Harness, victim, spare string) {
	t.Helper()
	sts, oldPodUID := startWorkload(ctx, t, h, "feed-loss", victim, spare)
	m := h.Machine(victim)
	waitWriter(t, h, sts.PV, victim, 3)
	bootBefore := m.BootID()
	t0 := time.Now()
	must(t, m.CutFeeds())
	t.Cleanup(func() { _ = m.RestoreFeeds() })
	n := waitTaint(ctx, t, h, victim, true)
	tTaint := time.Now()
	ev := requireLevelEvidence(t, n, 2, bootBefore, plugsOf(m))
	_, tVAGone, tRunning := requireMoved(ctx, t, h, sts, oldPodUID, victim, spare)
	requireSafe(t, h, sts.PV)
	t.Logf("evidence: level %d, plugs %v; timeline (feeds cut at 0): tainted %.1fs, volume released %.1fs, pod Running on %s %.1fs",
		ev.BMC.Level, plugNames(ev.BMC.Plugs), secs(tTaint, t0), secs(tVAGone, t0), spare, secs(tRunning, t0))

	must(t, m.RestoreFeeds()) // the BMC answers, then the machine boots
	must(t, h.WaitNodeReady(ctx, victim, podTimeout))
	waitTaint(ctx, t, h, victim, false)
	if m.BootID() == bootBefore {
		t.Fatal("boot ID did not change across the feed loss")
	}
	requireSafe(t, h, sts.PV)
}

// requireLevelEvidence checks that n's evidence is a power-off reading of
// fencing level level in boot bootBefore, with exactly the plugs want
// ("device:plug"), each read off and dated.
func requireLevelEvidence(t *testing.T, n *corev1.Node, level int, bootBefore string, want []string) core.Evidence {
	t.Helper()
	ev, ok, err := taint.EvidenceOf(n)
	if err != nil || !ok || ev.Method != vocab.EvidenceBMCPowerOff || ev.BMC == nil || ev.BMC.Power != vocab.PowerOff ||
		ev.BMC.Level != level || ev.BootID != bootBefore {
		t.Fatalf("node %s: evidence %+v (ok %v, err %v), want power off at level %d in boot %s; annotation %s",
			n.Name, ev, ok, err, level, bootBefore, n.Annotations[taint.AnnotationEvidence])
	}
	got := plugNames(ev.BMC.Plugs)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("node %s: evidence of level %d has plugs %v, want %v", n.Name, level, got, want)
	}
	for _, p := range ev.BMC.Plugs {
		if p.Power != vocab.PowerOff || p.At.IsZero() {
			t.Fatalf("node %s: plug %s:%s read %q at %v, want off and dated", n.Name, p.Device, p.Plug, p.Power, p.At)
		}
	}
	return ev
}

// plugsOf is the machine's outlets as a PDU level's plugs ("pdu-a:2").
func plugsOf(m *harness.Machine) []string {
	var out []string
	for _, o := range m.Outlets() {
		out = append(out, o.PDU+":"+strconv.Itoa(o.Number))
	}
	return out
}

func plugNames(plugs []core.Reading) []string {
	var out []string
	for _, p := range plugs {
		out = append(out, p.Device+":"+p.Plug)
	}
	return out
}

// mislabelled is pdu-a's plugs map for TestTopologyConfirmOnly: machine i
// on outlet i+1 (the harness's wiring), except that wrong is mapped to
// right's outlet and right to none.
func mislabelled(t *testing.T, wrong, right string) map[string]string {
	t.Helper()
	plugs := map[string]string{}
	for i, m := range topologyMachines {
		plugs[m] = strconv.Itoa(i + 1)
	}
	plugs[wrong] = plugs[right]
	delete(plugs, right)
	return plugs
}

// alarmOrTaint waits for the PowerReadingContradicted alarm on node and
// fails at once, with the evidence, if the node is tainted instead.
func alarmOrTaint(ctx context.Context, t *testing.T, h *harness.Harness, node string) {
	t.Helper()
	var alarm *corev1.Event
	poll.Until(t, podTimeout, fmt.Sprintf("a %s Event about %s", vocab.EventPowerReadingContradicted, node), func() bool {
		if n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil && taint.HasTaint(n) {
			t.Fatalf("node %s, alive (its agent answers), was tainted on a mislabelled outlet's reading: %s", node, n.Annotations[taint.AnnotationEvidence])
		}
		var err error
		alarm, err = h.FindEvent(ctx, "default", node, vocab.EventPowerReadingContradicted, "")
		return err == nil && alarm != nil
	})
	t.Logf("alarm: %s", alarm.Message)
}

// requireNoOutage fails if, during d, a Node that was Ready and untainted
// at the start loses either (Nodes an earlier failed scenario left tainted
// are not this scenario's).
func requireNoOutage(ctx context.Context, t *testing.T, h *harness.Harness, d time.Duration) {
	t.Helper()
	healthy := func(name string) (bool, string) {
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return harness.NodeReady(n) == corev1.ConditionTrue && !taint.HasTaint(n), fmt.Sprintf("Ready %s, taints %s", harness.NodeReady(n), taintKeys(n))
	}
	var watched []string
	for _, m := range h.Machines {
		if ok, why := healthy(m.Name); ok {
			watched = append(watched, m.Name)
		} else {
			t.Logf("node %s not watched, already unhealthy: %s", m.Name, why)
		}
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		for _, name := range watched {
			if ok, why := healthy(name); !ok {
				t.Fatalf("node %s: %s", name, why)
			}
		}
	}
}
