package e2e

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/internal/testbed/harness"
	"fenced.io/fenced/internal/testbed/hostile"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/vocab"
)

// TestHostileMember plays a compromised worker on the harness: a process
// holding the gossip key and the cluster label forges, in the name of
// healthy nodes, every gossip message memberlist and fenced accept —
// alive with shutdown-complete metadata, leave notices and leaves for
// three nodes at once, the same signed with the attacker's own key, an
// unrefutable dead, a member claiming to be a fencer, challenges and
// proofs — at the fencer. No node may be tainted or switched off, the
// workload on a victim keeps writing alone, and the fencer counts the
// rejected forgeries.
func TestHostileMember(t *testing.T) {
	harness.Parallel(t)
	ctx, h := harness.StartForTest(t, harness.Options{
		Machines: []string{"cp-1", "w-1", "w-2", "w-3", "w-4"},
		// Power-off mode with a short fenceAfter: the guards, not the
		// mode, must keep healthy nodes powered.
		Fencing: &harness.Fencing{Fencers: []string{"cp-1"}, Policy: "{mode: power-off, fenceAfter: 5s, fenceDelay: 1s}"},
	})
	fencer := h.Machine("cp-1")
	sts, _ := startWorkload(ctx, t, h, "hostile", "w-1", "w-4")
	waitWriter(t, h, sts.PV, "w-1", 3)

	f := forgerOn(t, h)
	to := fencer.Host.Addr.String() + ":" + strconv.Itoa(harness.GossipPort)
	attackerKey, err := identity.NewKey()
	must(t, err)

	forge := func(victim string, meta heartbeat.Meta, notice heartbeat.LeaveNotice, incarnation uint32) {
		t.Helper()
		n, err := h.Cluster.Client().CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		must(t, err)
		meta.Version, meta.Node, meta.BootID, meta.Role = heartbeat.MetaVersion, victim, n.Status.NodeInfo.BootID, heartbeat.RoleFencer
		if meta.Sig == "" && meta.Seq > 0 {
			meta.Sign(attackerKey, meta.Seq)
		}
		raw, err := meta.Encode()
		must(t, err)
		notice.Node, notice.BootID = victim, n.Status.NodeInfo.BootID
		if notice.Seq > 0 {
			notice.Sign(attackerKey, notice.Seq)
		}
		addr := h.Machine(victim).Host.Addr
		must(t, f.Alive(to, hostile.Alive{Name: victim, Incarnation: incarnation, Addr: net.IP(addr.AsSlice()), Port: harness.GossipPort, Meta: raw}))
		must(t, f.UserTCP(to, heartbeat.EncodeLeaveNotice(notice)))
		must(t, f.Dead(to, victim, incarnation, victim))
	}
	t0 := time.Now()
	// One burst, three nodes, no signature: the forged-shutdown attack.
	for i, victim := range []string{"w-1", "w-2", "w-3"} {
		forge(victim, heartbeat.Meta{State: vocab.AnnounceShutdownComplete}, heartbeat.LeaveNotice{}, uint32(1_000_000+i))
	}
	// Signed, but with the attacker's own key.
	forge("w-2", heartbeat.Meta{State: vocab.AnnounceShutdownComplete, Seq: 50}, heartbeat.LeaveNotice{Seq: 51}, 2_000_000)
	// Dead at the top incarnation: memberlist cannot refute it.
	must(t, f.Dead(to, "w-3", ^uint32(0), "cp-1"))
	// A member that is not a Node and claims the fencer role.
	evil, _ := (heartbeat.Meta{Version: heartbeat.MetaVersion, Node: "evil", Role: heartbeat.RoleFencer}).Encode()
	must(t, f.Alive(to, hostile.Alive{Name: "evil", Incarnation: 1, Addr: net.IP(h.Machine("w-4").Host.Addr.AsSlice()), Port: harness.GossipPort, Meta: evil}))
	// Challenges and proofs nobody asked for.
	must(t, f.UserTCP(to, heartbeat.EncodeChallenge("w-1", "198.18.255.254:7946", make([]byte, 16))))
	must(t, f.UserTCP(to, heartbeat.EncodeProof(heartbeat.Proof{Node: "w-2", State: "running", Seq: 1, Nonce: make([]byte, 16)})))

	for _, victim := range []string{"w-1", "w-2", "w-3"} {
		requireNoTaintFor(ctx, t, h, victim, 5*time.Second)
	}
	requireNoTaintFor(ctx, t, h, "w-1", 25*time.Second) // past fenceAfter and the fence delay, several times
	requirePowerOffs(t, h, 0)
	for _, m := range h.Machines {
		if _, alive := m.BMC.MachinePID(); !alive {
			t.Fatalf("%s is off after the attack", m.Name)
		}
	}
	requireAttachedTo(ctx, t, h, sts.PV, "w-1")
	before := writerRecords(t, h, sts.PV, "w-1")
	waitWriter(t, h, sts.PV, "w-1", before+3)
	requireSafe(t, h, sts.PV)

	forged := 0.0
	for _, kind := range []string{"unsigned-announcement", "bad-signature"} {
		v := metricValue(t, fencer, `fenced_gossip_forgeries_total{kind="`+kind+`"}`)
		if v == 0 {
			t.Errorf("fenced_gossip_forgeries_total{kind=%q} is 0", kind)
		}
		forged += v
	}
	log := fencer.AgentLog()
	if !strings.Contains(log, "rejected a gossip claim not signed by the node's own key") {
		t.Error("the fencer did not log the rejected forgeries")
	}
	if strings.Contains(log, "out-of-service taint applied") {
		t.Fatal("the fencer applied a taint")
	}
	t.Logf("%.0f forged claims rejected within %.1fs; no taint, no power action, the writer on w-1 kept writing alone",
		forged, time.Since(t0).Seconds())
}

// forgerOn is a compromised worker of h: a forger holding the ring's key
// and label, allowed to reach the machines' network namespaces.
func forgerOn(t *testing.T, h *harness.Harness) *hostile.Forger {
	t.Helper()
	key, err := h.GossipKey()
	must(t, err)
	f, err := hostile.New(key, harness.ClusterName)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	f.AllowNonLoopback = true // the machines live in network namespaces the test made
	return f
}
