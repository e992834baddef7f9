package fencing

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"fenced.io/fenced/internal/testbed/hostile"
	"fenced.io/fenced/internal/testbed/poll"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/identity/publish"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// The hostile-member suite at the fencer's level: real gossip Rings (the
// fencer's and the victims', each agent with its own published key), the
// real Fencer and Tainter against an API (client-go's fake clientset), and
// an attacker holding the gossip key and label that forges every
// memberlist message it can (internal/testbed/hostile). The same attacks run on the
// harness in test/e2e (TestHostileMember).

const (
	hostileNS    = "fenced-system"
	hostileLabel = "hostile-test"
)

var hostileGossipKey = []byte("0123456789abcdef0123456789abcdef")

// countingBMC reads a fixed power state and counts what it is asked.
type countingBMC struct {
	power     atomic.Value // PowerState
	reads     atomic.Int32
	powerOffs atomic.Int32
}

func newCountingBMC(p vocab.PowerState) *countingBMC {
	b := &countingBMC{}
	b.power.Store(p)
	return b
}

func (b *countingBMC) PowerState(context.Context) (vocab.PowerState, error) {
	b.reads.Add(1)
	return b.power.Load().(vocab.PowerState), nil
}
func (b *countingBMC) PowerOff(context.Context) error {
	b.powerOffs.Add(1)
	b.power.Store(vocab.PowerOff)
	return nil
}
func (b *countingBMC) PowerOn(context.Context) error    { b.power.Store(vocab.PowerOn); return nil }
func (b *countingBMC) PowerCycle(context.Context) error { return nil }
func (b *countingBMC) SystemGUID(context.Context) (string, error) {
	return "", &device.Error{Kind: vocab.KindNotSupported}
}
func (b *countingBMC) Close() error { return nil }

// victim is a healthy node with a genuine agent.
type victim struct {
	name, boot string
	ip         string // its own loopback address; all agents share one port
	key        *identity.Key
	ring       *heartbeat.Ring
	bmc        *countingBMC
}

type hostileBed struct {
	t       *testing.T
	client  *fake.Clientset
	port    int
	fencer  *Fencer
	ring    *heartbeat.Ring // the fencer's
	victims map[string]*victim
	reg     *prometheus.Registry
	forger  *hostile.Forger
	logf    func(t *testing.T, member string) *slog.Logger // each agent's logger
}

// freeSharedPort finds a port free for TCP and UDP on each address.
func freeSharedPort(t *testing.T, ips ...string) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", ips[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := true
		for _, ip := range ips {
			addr := net.JoinHostPort(ip, strconv.Itoa(port))
			tl, err1 := net.Listen("tcp", addr)
			ul, err2 := net.ListenPacket("udp", addr)
			if tl != nil {
				tl.Close()
			}
			if ul != nil {
				ul.Close()
			}
			if err1 != nil || err2 != nil {
				ok = false
				break
			}
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on every address")
	return 0
}

func hostileNode(name, boot, ip string, ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))},
		Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{BootID: boot},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Minute))}},
		},
	}
}

// newHostileBed starts a fencer at 127.0.0.1 and a genuine agent for each
// victim at 127.0.0.2, .3, …, all Ready, each with its key published, and
// the admission policy that guards the keys in place.
func newHostileBed(t *testing.T, p core.Policy, victims ...string) *hostileBed {
	t.Helper()
	return newHostileBedLogging(t, p, testLog, victims...)
}

// newHostileBedLogging is newHostileBed with every agent (the fencer's
// and the victims') logging to logf(t, member).
func newHostileBedLogging(t *testing.T, p core.Policy, logf func(*testing.T, string) *slog.Logger, victims ...string) *hostileBed {
	t.Helper()
	ips := []string{"127.0.0.1"}
	for i := range victims {
		ips = append(ips, "127.0.0."+strconv.Itoa(i+2))
	}
	b := &hostileBed{t: t, port: freeSharedPort(t, ips...), victims: map[string]*victim{}, reg: prometheus.NewRegistry(), logf: logf}
	// The shipped admission policy, so that the fencer takes nodes'
	// signed word (publish.PolicyInForce).
	policy, binding, err := publish.ShippedFor(hostileNS)
	if err != nil {
		t.Fatal(err)
	}
	orders, orderBinding, err := publish.OrderPolicyFor(hostileNS)
	if err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{hostileNode("fencer", "boot-fencer", ips[0], corev1.ConditionTrue), policy, binding, orders, orderBinding}
	for i, name := range victims {
		v := &victim{name: name, boot: "boot-" + name, ip: ips[i+1], bmc: newCountingBMC(vocab.PowerOn)}
		b.victims[name] = v
		objs = append(objs, hostileNode(name, v.boot, v.ip, corev1.ConditionTrue))
	}
	b.client = fake.NewClientset(objs...)
	isNode := b.isNode
	b.ring = b.join("fencer", "boot-fencer", ips[0], nil, isNode)
	bmcs, endpoints := map[string]device.BMC{}, map[string]string{}
	for _, name := range victims {
		v := b.victims[name]
		var err error
		if v.key, err = identity.NewKey(); err != nil {
			t.Fatal(err)
		}
		if err := publish.Publish(t.Context(), b.client, hostileNS, name, v.boot, v.key.Public(), time.Now()); err != nil {
			t.Fatal(err)
		}
		v.ring = b.join(name, v.boot, v.ip, v.key, isNode)
		bmcs[name], endpoints[name] = v.bmc, "test://"+name
	}
	inv := inventoryOf(bmcs, endpoints)
	b.fencer = startFencer(t, Config{
		Identity: "fencer", Client: b.client, Inventory: inv, Members: b.ring,
		Tainter: taint.NewTainter(b.client, "fencer", nil), Recorder: record.NewFakeRecorder(10000),
		Policy: p, LeaseNamespace: hostileNS, GossipPort: b.port, Metrics: NewMetrics(b.reg),
		Logger: logf(t, "fencer"),
	})
	b.ring.OnChange(func(m heartbeat.Member) { b.fencer.Notify(m.Name) })
	b.waitFor(20*time.Second, "the fencer's ring sees every victim alive", func() bool { return b.ring.Alive() == len(victims)+1 })
	b.waitFor(20*time.Second, "the fencer takes nodes' signed word", b.fencer.policyOK.Load)
	if b.forger, _ = hostile.New(hostileGossipKey, hostileLabel); b.forger == nil {
		t.Fatal("no forger")
	}
	t.Cleanup(func() { b.forger.Close() })
	return b
}

// isNode is the rings' admission check: a Node of the fake API.
func (b *hostileBed) isNode(name string) bool {
	_, err := b.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	return err == nil
}

func (b *hostileBed) join(name, boot, ip string, key *identity.Key, isNode func(string) bool) *heartbeat.Ring {
	b.t.Helper()
	cfg := heartbeat.Config{NodeName: name, BindAddr: ip, BindPort: b.port, ClusterName: hostileLabel, SecretKey: hostileGossipKey,
		ProbeInterval: 200 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond, SuspicionMult: 2, GossipInterval: 50 * time.Millisecond}
	var seeds func() []string
	if b.ring != nil {
		seeds = func() []string { return []string{b.ring.LocalAddr()} }
	}
	// The fencer's ring judges the victims' beats, as a fencer's does.
	role := heartbeat.RoleObserver
	if name == "fencer" {
		role = heartbeat.RoleFencer
	}
	r, err := heartbeat.New(cfg, heartbeat.Options{
		Meta: heartbeat.Meta{Node: name, BootID: boot, Role: role}, Seeds: seeds, IsNode: isNode, Key: key, Logger: b.logf(b.t, name),
		ChallengerAddrs: b.nodeGossipAddrs})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { r.Shutdown() })
	if err := r.Join(b.t.Context(), ""); err != nil {
		b.t.Fatal(err)
	}
	return r
}

// nodeGossipAddrs is what the API says Node name's gossip address is
// (its InternalIP at the shared port): where its agent may be answered.
func (b *hostileBed) nodeGossipAddrs(name string) []string {
	n, err := b.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || taint.InternalIP(n) == "" {
		return nil
	}
	return []string{net.JoinHostPort(taint.InternalIP(n), strconv.Itoa(b.port))}
}

func (b *hostileBed) waitFor(timeout time.Duration, what string, cond func() bool) {
	b.t.Helper()
	poll.Until(b.t, timeout, what, cond)
}

// tainted lists the nodes that carry the out-of-service taint.
func (b *hostileBed) tainted() []string {
	nodes, err := b.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	var out []string
	for i := range nodes.Items {
		if taint.HasTaint(&nodes.Items[i]) {
			out = append(out, nodes.Items[i].Name)
		}
	}
	return out
}

// assertNoHarm watches for d that no victim is tainted or switched off.
func (b *hostileBed) assertNoHarm(d time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if tn := b.tainted(); len(tn) > 0 {
			b.t.Fatalf("healthy node(s) %v tainted after forged gossip", tn)
		}
		for _, v := range b.victims {
			if n := v.bmc.powerOffs.Load(); n > 0 {
				b.t.Fatalf("healthy node %s switched off %d time(s) after forged gossip", v.name, n)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *hostileBed) forgeries(kind string) float64 {
	return testutil.ToFloat64(b.fencer.cfg.Metrics.Forgeries.WithLabelValues(kind))
}

// metaFor is a victim's metadata as the attacker writes it: the victim's
// real boot ID (public in status.nodeInfo.bootID), any state, and a
// signature by key (nil: unsigned).
func metaFor(t *testing.T, v *victim, state vocab.Announcement, boot string, key *identity.Key, seq uint64) []byte {
	t.Helper()
	// It claims to be a fencer, too: roles come from Kubernetes labels,
	// so the claim gains nothing.
	m := heartbeat.Meta{Version: heartbeat.MetaVersion, Node: v.name, BootID: boot, Role: heartbeat.RoleFencer, State: state}
	m.Sign(key, seq)
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cleanShutdownBurst is the forged-shutdown attack: in the victim's name, an
// alive with its real address, a higher incarnation and shutdown-complete
// metadata, a leave notice, and memberlist's leave ("dead" from itself).
func (b *hostileBed) cleanShutdownBurst(v *victim, meta []byte, incarnation uint32, notice heartbeat.LeaveNotice) {
	b.t.Helper()
	to := b.ring.LocalAddr()
	if err := b.forger.Alive(to, hostile.Alive{Name: v.name, Incarnation: incarnation, Addr: net.ParseIP(v.ip), Port: uint16(b.port), Meta: meta}); err != nil {
		b.t.Fatal(err)
	}
	if err := b.forger.UserTCP(to, heartbeat.EncodeLeaveNotice(notice)); err != nil {
		b.t.Fatal(err)
	}
	if err := b.forger.Dead(to, v.name, incarnation, v.name); err != nil {
		b.t.Fatal(err)
	}
}

// TestHostileMemberCannotTaint: every forgery a gossip-key holder can make
// about healthy nodes leads to no taint and no power action, and the
// rejected claims are counted; the same nodes' genuine clean shutdown
// still taints with clean-shutdown evidence and no BMC read.
func TestHostileMemberCannotTaint(t *testing.T) {
	if testing.Short() {
		t.Skip("real gossip rings")
	}
	p := testPolicy(vocab.ModeConfirmOnly)
	b := newHostileBed(t, p, "victim-1", "victim-2", "victim-3", "victim-4", "bystander")
	v1, v2, v3, v4 := b.victims["victim-1"], b.victims["victim-2"], b.victims["victim-3"], b.victims["victim-4"]
	attackerKey, _ := identity.NewKey()
	oldKey, _ := identity.NewKey() // the victim's key in an earlier boot

	// A genuine cancelled shutdown of victim-4 gives the attacker a real
	// signed shutting-down to replay later.
	if err := v4.ring.Announce(vocab.AnnounceShuttingDown); err != nil {
		t.Fatal(err)
	}
	b.waitFor(10*time.Second, "the fencer sees victim-4 shutting down", func() bool {
		m, _ := b.ring.Member("victim-4")
		return m.Meta.State == vocab.AnnounceShuttingDown
	})
	m, _ := b.ring.Member("victim-4")
	genuineShuttingDown := m.Meta
	if err := v4.ring.Announce(vocab.AnnounceRunning); err != nil {
		t.Fatal(err)
	}
	b.waitFor(10*time.Second, "the fencer sees victim-4 running again", func() bool {
		m, _ := b.ring.Member("victim-4")
		return m.Meta.State == vocab.AnnounceRunning
	})
	b.assertNoHarm(time.Second)

	attacks := []struct {
		name string
		run  func()
		kind string // the forgery kind the fencer must count
	}{
		{"unsigned shutdown-complete, leave notice and leave, three nodes at once", func() {
			for i, v := range []*victim{v1, v2, v3} {
				b.cleanShutdownBurst(v, metaFor(t, v, vocab.AnnounceShutdownComplete, v.boot, nil, 0), uint32(1000+i),
					heartbeat.LeaveNotice{Node: v.name, BootID: v.boot})
			}
		}, forgedUnsigned},
		{"signed with the attacker's own key", func() {
			b.cleanShutdownBurst(v1, metaFor(t, v1, vocab.AnnounceShutdownComplete, v1.boot, attackerKey, 99), 2000,
				signedNotice(attackerKey, v1.name, v1.boot, 100))
		}, forgedBadSignature},
		{"replay from an earlier boot", func() {
			b.cleanShutdownBurst(v2, metaFor(t, v2, vocab.AnnounceShutdownComplete, "boot-earlier", oldKey, 7), 3000,
				signedNotice(oldKey, v2.name, "boot-earlier", 8))
		}, forgedBadSignature},
		{"replay of a genuine shutting-down from an earlier moment, then dead at the top incarnation", func() {
			raw, err := genuineShuttingDown.Encode()
			if err != nil {
				t.Fatal(err)
			}
			to := b.ring.LocalAddr()
			if err := b.forger.Alive(to, hostile.Alive{Name: v4.name, Incarnation: 4000, Addr: net.ParseIP(v4.ip), Port: uint16(b.port), Meta: raw}); err != nil {
				t.Fatal(err)
			}
			// Unrefutable: memberlist cannot raise an incarnation past it.
			if err := b.forger.Dead(to, v4.name, ^uint32(0), "fencer"); err != nil {
				t.Fatal(err)
			}
		}, forgedReplay},
		{"forged challenges and proofs", func() {
			to := b.ring.LocalAddr()
			for _, msg := range [][]byte{
				heartbeat.EncodeChallenge("victim-1", "198.18.0.1:7946", make([]byte, 16)),
				heartbeat.EncodeProof(heartbeat.Proof{Node: "victim-1", BootID: v1.boot, State: "running", Seq: 1, Nonce: make([]byte, 16)}),
			} {
				if err := b.forger.UserTCP(to, msg); err != nil {
					t.Fatal(err)
				}
			}
		}, ""},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			before := 0.0
			if a.kind != "" {
				before = b.forgeries(a.kind)
			}
			a.run()
			b.assertNoHarm(3 * time.Second)
			if a.kind != "" && b.forgeries(a.kind) <= before {
				t.Fatalf("fenced_gossip_forgeries_total{kind=%q} did not grow", a.kind)
			}
		})
	}
	// The forged dead of victim-4 sent the fencer to its BMC (suspicion is
	// cheap); the replayed shutting-down did not hold that read back.
	b.waitFor(10*time.Second, "victim-4's BMC is read", func() bool { return v4.bmc.reads.Load() > 0 })

	// Positive control: a node the attacker left alone really shuts down
	// cleanly. (The attacked ones would too, but the forged incarnations
	// hide their own updates from the fencer until memberlist refutes
	// them: then the fencer asks their BMC, which is safe, just slower.)
	bystander := b.victims["bystander"]
	// Reads before now do not count: on a loaded machine the in-process
	// rings may suspect a member falsely, and the fencer rightly reads
	// its BMC then.
	readsBefore := bystander.bmc.reads.Load()
	for _, s := range []vocab.Announcement{vocab.AnnounceShuttingDown, vocab.AnnounceShutdownComplete} {
		if err := bystander.ring.Announce(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := bystander.ring.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	b.waitFor(20*time.Second, "the bystander tainted on its own clean-shutdown word", func() bool {
		n, _ := b.client.CoreV1().Nodes().Get(context.Background(), "bystander", metav1.GetOptions{})
		ev, ok, _ := taint.EvidenceOf(n)
		return taint.HasTaint(n) && ok && ev.Method == vocab.EvidenceCleanShutdown
	})
	if tn := b.tainted(); len(tn) != 1 {
		t.Fatalf("tainted %v, want only the bystander", tn)
	}
	if r := bystander.bmc.reads.Load() - readsBefore; r != 0 {
		t.Fatalf("the bystander's BMC was read %d times during its clean shutdown", r)
	}
}

// TestHostileMemberCannotPowerOff: in power-off mode, a node cut off from
// the API server only (its kubelet NotReady, its agent up) that a forger
// declares dead for good is never switched off: its agent answers the
// fencer's challenges.
func TestHostileMemberCannotPowerOff(t *testing.T) {
	if testing.Short() {
		t.Skip("real gossip rings")
	}
	b := newPowerOffBed(t)
	v1 := b.victims["victim-1"]
	// The kubelet lost the API server ten minutes ago.
	n, _ := b.client.CoreV1().Nodes().Get(context.Background(), v1.name, metav1.GetOptions{})
	n.Status.Conditions[0].Status = corev1.ConditionUnknown
	if _, err := b.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.forger.Dead(b.ring.LocalAddr(), v1.name, ^uint32(0), "fencer"); err != nil {
		t.Fatal(err)
	}
	b.waitFor(10*time.Second, "the fencer sees the forged dead", func() bool {
		m, _ := b.ring.Member(v1.name)
		return m.State == vocab.MemberDead
	})
	b.waitFor(20*time.Second, "the fencer challenges victim-1 and gets its proof", func() bool {
		b.fencer.mu.Lock()
		defer b.fencer.mu.Unlock()
		s := b.fencer.state[v1.name]
		return s != nil && !s.agent.LastProof.IsZero()
	})
	b.assertNoHarm(5 * time.Second)
	if v1.bmc.reads.Load() == 0 {
		t.Fatal("the fencer never read victim-1's BMC: the test did not reach the power-off decision")
	}
}

// newPowerOffBed is the bed of three victims in power-off mode with
// fenceAfter, the fence delay and the challenge interval at 1 s: only the
// guards, not the timers, keep a healthy node powered.
func newPowerOffBed(t *testing.T) *hostileBed {
	t.Helper()
	p := testPolicy(vocab.ModePowerOff)
	p.FenceAfter, p.FenceDelay, p.ChallengeInterval = time.Second, time.Second, time.Second
	return newHostileBed(t, p, "victim-1", "victim-2", "victim-3")
}

// testLog is a logger into t.Log.
func testLog(t *testing.T, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("member", name)
}

type tWriter struct{ t *testing.T }

var tWriterMu sync.Mutex

func (w tWriter) Write(p []byte) (int, error) {
	tWriterMu.Lock()
	defer tWriterMu.Unlock()
	w.t.Log(string(p))
	return len(p), nil
}

// signedNotice is a leave notice signed by key.
func signedNotice(key *identity.Key, node, boot string, seq uint64) heartbeat.LeaveNotice {
	n := heartbeat.LeaveNotice{Node: node, BootID: boot}
	n.Sign(key, seq)
	return n
}
