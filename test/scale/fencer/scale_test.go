package fencer_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"fenced.io/fenced/internal/testbed/cluster"
	"fenced.io/fenced/internal/testbed/hostile"
	"fenced.io/fenced/internal/testbed/ipmisim"
	"fenced.io/fenced/internal/testbed/pdusim"
	"fenced.io/fenced/internal/testbed/ports"
	"fenced.io/fenced/internal/testbed/procstat"
	"fenced.io/fenced/internal/testbed/soak"
	"fenced.io/fenced/pkg/fencing"
	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

// size is one scenario's scale.
type size struct {
	name string
	// nodes in the cluster; rack nodes in each of the two racks that go
	// dark; members: gossip members besides the racks' own.
	nodes, rack, members int
	// bmcTimeout and bmcRetries are the inventory's (0: the defaults).
	bmcTimeout time.Duration
	bmcRetries int
	// readBound is fencer.maxConcurrentPowerReads (0: the default).
	readBound int
	// settle before, and window of, the measurement at rest.
	settle, window time.Duration
	// taintTimeout bounds each rack's wait for its last taint.
	taintTimeout time.Duration
}

// smoke runs in every `go test`; full is `make bench-scale`. The full
// size's ring is 101 members: 200 in this one process flapped (false
// deaths at rest) on the shared 2-core machine and the fencer never got
// ready. With 101, once rack A is down, rack B's members die in a ring
// where 80 of 101 are gone — fewer members left to confirm suspicions
// than a real cluster's 960 of 1000 — so its gossip detection is slower
// than a real rack's would be (the table's "whole rack dead" column).
var (
	smoke = size{name: "smoke", nodes: 20, rack: 3, members: 6, bmcTimeout: time.Second, bmcRetries: 1, readBound: 2,
		settle: 2 * time.Second, window: 5 * time.Second, taintTimeout: 90 * time.Second}
	full = size{name: "full", nodes: 1000, rack: 40, members: 20,
		settle: 40 * time.Second, window: 60 * time.Second, taintTimeout: 5 * time.Minute}
)

// benchEnv selects the full size.
const benchEnv = "FENCED_BENCH_SCALE"

// readsEnv sets fencer.maxConcurrentPowerReads (default: the smoke's 2,
// the full size's fencing.DefaultMaxConcurrentPowerReads).
const readsEnv = "FENCED_BENCH_SCALE_READS"

// outEnv names the file the table is written to besides the test log.
const outEnv = "FENCED_BENCH_SCALE_OUT"

// figuresEnv names a file for the run's figures as JSON
// (soak.ScaleFigures), for make bench-scale-medians.
const figuresEnv = "FENCED_BENCH_SCALE_FIGURES"

// fencerGroup is the group of the fencer's client certificate: the audit
// policy records its requests only.
const fencerGroup = "fenced:fencers"

const leaseNamespace = "fenced-system"

// gossipKey encrypts the ring, as every ring in the field is (the chart
// makes a key; --insecure-gossip is for labs).
var gossipKey = []byte("scale-bench-gossip-key-32-bytes!")

// TestFencerAtScale: one fencer (the fenced binary) watching a cluster of
// Nodes kept alive by the light kubelet simulator; measured at rest; then
// one node loses power, then a rack goes dark with its BMCs up (read off),
// then another with its BMCs dark and its PDU's outlets off (read off at
// the PDU level). Asserted: every node that lost power is tainted, every
// taint carries evidence, no other node is tainted, no power action (every rack node reads
// off: there is nothing to switch) and never more power Leases than
// maxConcurrentPowerActions, never more reads in flight than the bound.
func TestFencerAtScale(t *testing.T) {
	sz := smoke
	if os.Getenv(benchEnv) != "" {
		sz = full
	}
	if v := os.Getenv(readsEnv); v != "" {
		n, err := strconv.Atoi(v)
		must(t, err)
		sz.readBound = n
	}
	for _, bin := range []string{"ipmi_sim", "snmpd", "fence_apc_snmp"} {
		if _, err := exec.LookPath(bin); err != nil {
			if _, err := os.Stat("/usr/sbin/" + bin); err != nil {
				t.Skipf("%s not installed (make deps)", bin)
			}
		}
	}
	dir := t.TempDir()
	auditLog := filepath.Join(dir, "audit.log")
	policy := filepath.Join(dir, "audit-policy.yaml")
	must(t, os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [\"RequestReceived\"]\nrules:\n"+
		"- level: Metadata\n  userGroups: [\""+fencerGroup+"\"]\n- level: None\n"), 0o600))
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true,
		APIServerArgs: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog,
			// The simulated kubelets write ~100 Leases a second.
			"--max-requests-inflight=800", "--max-mutating-requests-inflight=400"}})
	rc := c.RESTConfig()
	rc.QPS, rc.Burst = 1000, 2000
	client, err := kubernetes.NewForConfig(rc)
	must(t, err)
	_, err = c.CreateNamespace(ctx, leaseNamespace)
	must(t, err)

	s := &scenario{t: t, sz: sz, client: client, dir: dir}
	s.layout()
	s.startBMCs()
	sim := &kubelets{client: client}
	sim.register(ctx, t, s.nodes)
	simCtx, stopSim := context.WithCancel(ctx)
	t.Cleanup(stopSim)
	sim.run(simCtx, s.names())
	s.kubelets = sim
	s.startMembers(ctx)
	s.watchTaints(ctx)

	kubeconfig, err := c.UserKubeconfig("fenced-scale-fencer", "system:masters", fencerGroup)
	must(t, err)
	res := &results{size: sz}
	s.startFencer(ctx, kubeconfig, res)
	s.floodBeats(ctx, res)
	s.atRest(res, auditLog)
	s.rackDark(ctx, "solo", []string{s.solo}, false, &res.runs[0])
	s.rackDark(ctx, "A", s.rackA, false, &res.runs[1])
	s.rackDark(ctx, "B", s.rackB, true, &res.runs[2])
	s.checkTaints()
	res.falseDeaths = s.falseDeaths()
	res.renewals, res.renewFailures = sim.renewals.Load(), sim.failures.Load()
	res.print(t)
}

// scenario holds what the test built.
type scenario struct {
	t      *testing.T
	sz     size
	client kubernetes.Interface
	dir    string

	nodes        []simNode
	rackA, rackB []string
	// solo is the node that loses power alone, first.
	solo        string
	memberNames []string
	ips         map[string]string
	bmcs        map[string]*ipmisim.Sim
	pdu         *pdusim.PDU
	outlet      map[string]int
	kubelets    *kubelets
	rings       map[string]*heartbeat.Ring
	gossipPort  int
	metricsURL  string
	pid         int

	mu      sync.Mutex
	tainted map[string]time.Time // first time seen tainted
	badEv   []string             // taints without evidence
}

// layout names the Nodes: the racks first, then the other members, then
// the rest. Members listen on their own loopback addresses, 127.0.1.0/24
// on; the Nodes without a member get addresses where nothing listens.
func (s *scenario) layout() {
	sz := s.sz
	s.ips = map[string]string{}
	withMember := 2*sz.rack + sz.members
	for i := range sz.nodes {
		name := fmt.Sprintf("node-%04d", i)
		ip := fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
		if i >= withMember {
			ip = fmt.Sprintf("127.1.%d.%d", i/250, 1+i%250)
		} else {
			s.memberNames = append(s.memberNames, name)
		}
		s.ips[name] = ip
		switch {
		case i < sz.rack:
			s.rackA = append(s.rackA, name)
		case i < 2*sz.rack:
			s.rackB = append(s.rackB, name)
		case i == 2*sz.rack:
			s.solo = name
		}
		s.nodes = append(s.nodes, simNode{name: name, ip: ip})
	}
}

// lost are the nodes that lose power in the run: the solo node and the
// racks, each with a BMC.
func (s *scenario) lost() []string {
	return append(append([]string{s.solo}, s.rackA...), s.rackB...)
}

func (s *scenario) names() []string {
	out := make([]string, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.name
	}
	return out
}

// startBMCs starts an ipmi_sim for the solo node and every rack node
// (their system UUIDs go on the Nodes) and the PDU that feeds rack B, one
// outlet per node.
func (s *scenario) startBMCs() {
	t := s.t
	racks := s.lost()
	s.bmcs = map[string]*ipmisim.Sim{}
	var mu sync.Mutex
	stop := startProgress(t, "starting ipmi_sim BMCs", func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d/%d", len(s.bmcs), len(racks))
	})
	parallel(context.Background(), t, len(racks), 4, func(i int) error {
		b := ipmisim.Start(t, ipmisim.Options{Name: racks[i], Dir: filepath.Join(s.dir, "bmc", racks[i])})
		mu.Lock()
		s.bmcs[racks[i]] = b
		mu.Unlock()
		return nil
	})
	stop()
	for i := range s.nodes {
		if b, ok := s.bmcs[s.nodes[i].name]; ok {
			s.nodes[i].uuid = b.SystemUUID
		}
	}
	s.outlet = map[string]int{}
	for i, n := range s.rackB {
		s.outlet[n] = i + 1
	}
	s.pdu = pdusim.Start(t, pdusim.Options{Name: "pdu-b", Outlets: len(s.rackB), Names: s.rackB, Dir: filepath.Join(s.dir, "pdu-b")})
}

// startMembers runs a real gossip ring member for each member Node, each
// on its own loopback address and the shared gossip port, joined to the
// first.
func (s *scenario) startMembers(ctx context.Context) {
	t := s.t
	p, err := ports.Free("tcp", "127.0.0.1", 1)
	must(t, err)
	s.gossipPort = p[0]
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s.rings = map[string]*heartbeat.Ring{}
	first := net.JoinHostPort(s.ips[s.memberNames[0]], strconv.Itoa(s.gossipPort))
	var mu sync.Mutex
	stop := startProgress(t, "joining gossip members", func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d/%d", len(s.rings), len(s.memberNames))
	})
	defer stop()
	join := func(i int) error {
		name := s.memberNames[i]
		r, err := heartbeat.New(heartbeat.Config{NodeName: name, BindAddr: s.ips[name], BindPort: s.gossipPort,
			ClusterName: "scale", SecretKey: gossipKey}, heartbeat.Options{
			Meta:  heartbeat.Meta{Node: name, BootID: "boot-" + name, Role: "observer", State: vocab.AnnounceRunning},
			Seeds: func() []string { return []string{first} }, Logger: quiet,
		})
		if err != nil {
			return fmt.Errorf("member %s: %w", name, err)
		}
		if err := r.Join(ctx, s.ips[name]); err != nil {
			return fmt.Errorf("member %s joining: %w", name, err)
		}
		mu.Lock()
		s.rings[name] = r
		mu.Unlock()
		t.Cleanup(func() { _ = r.Shutdown() })
		return nil
	}
	must(t, join(0))
	parallel(ctx, t, len(s.memberNames)-1, 4, func(i int) error { return join(i + 1) })
}

// watchTaints records when each Node is first seen with the
// out-of-service taint, and whether the taint carried evidence.
func (s *scenario) watchTaints(ctx context.Context) {
	s.tainted = map[string]time.Time{}
	f := informers.NewSharedInformerFactory(s.client, 0)
	inf := f.Core().V1().Nodes().Informer()
	seen := func(o any) {
		n, ok := o.(*corev1.Node)
		if !ok || !taint.HasTaint(n) {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, done := s.tainted[n.Name]; done {
			return
		}
		s.tainted[n.Name] = time.Now()
		if _, ok, err := taint.EvidenceOf(n); !ok || err != nil {
			s.badEv = append(s.badEv, fmt.Sprintf("%s (err %v)", n.Name, err))
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }})
	must(s.t, err)
	// Its own context: the test's ends only after every cleanup, and
	// Shutdown waits for the informers to stop.
	ictx, cancel := context.WithCancel(ctx)
	f.Start(ictx.Done())
	s.t.Cleanup(func() { cancel(); f.Shutdown() })
	f.WaitForCacheSync(ictx.Done())
}

// fencerConfig is the fencer's configuration: power-off mode (the storm
// guard and the quorum guard apply), every rack node's BMC, and for rack B
// the PDU as a second level.
func (s *scenario) fencerConfig() string {
	var b strings.Builder
	keyFile := filepath.Join(s.dir, "gossip.key")
	must(s.t, os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(gossipKey)+"\n"), 0o600))
	fmt.Fprintf(&b, "apiVersion: fenced.io/v1alpha1\nkind: FencedConfiguration\nclusterName: scale\ngossip: {port: %d, keyFile: %s}\n", s.gossipPort, keyFile)
	b.WriteString("policy: {mode: power-off}\nshutdown: {announce: false}\n")
	fmt.Fprintf(&b, "fencer: {leaseNamespace: %s", leaseNamespace)
	if s.sz.readBound > 0 {
		fmt.Fprintf(&b, ", maxConcurrentPowerReads: %d", s.sz.readBound)
	}
	b.WriteString("}\nbmc:\n  defaults: {protocol: ipmi, username: admin")
	if s.sz.bmcTimeout > 0 {
		fmt.Fprintf(&b, ", timeout: %s, retries: %d", s.sz.bmcTimeout, s.sz.bmcRetries)
	}
	b.WriteString("}\n  nodes:\n")
	for _, n := range s.lost() {
		bmc := s.bmcs[n]
		pw := filepath.Join(s.dir, n+".bmc-password")
		must(s.t, os.WriteFile(pw, []byte(bmc.Password+"\n"), 0o600))
		fmt.Fprintf(&b, "    - {name: %s, address: %s, port: %d, passwordFile: %s}\n", n, bmc.Addr, bmc.Port, pw)
	}
	community := filepath.Join(s.dir, "pdu-b.community")
	must(s.t, os.WriteFile(community, []byte(s.pdu.Community+"\n"), 0o600))
	var plugs []string
	for _, n := range s.rackB {
		plugs = append(plugs, fmt.Sprintf("%s: %q", n, strconv.Itoa(s.outlet[n])))
	}
	fmt.Fprintf(&b, "fenceDevices:\n  - name: pdu-b\n    agent: fence_apc_snmp\n    options: {ip: %s, ipport: \"%d\", snmp_version: \"2c\"}\n"+
		"    secretOptions: {community: %s}\n    plugs: {%s}\n", s.pdu.Host, s.pdu.Port, community, strings.Join(plugs, ", "))
	b.WriteString("topology:\n  nodes:\n")
	for _, n := range append([]string{s.solo}, s.rackA...) {
		fmt.Fprintf(&b, "    - {name: %s, levels: [[bmc]]}\n", n)
	}
	for _, n := range s.rackB {
		fmt.Fprintf(&b, "    - {name: %s, levels: [[bmc], [pdu-b]]}\n", n)
	}
	return b.String()
}

// startFencer builds fenced and runs `fenced agent` as the fencer, then
// times its start: to its informers synced ("fencer started") and to its
// /readyz.
func (s *scenario) startFencer(ctx context.Context, kubeconfig string, res *results) {
	t := s.t
	bin := filepath.Join(s.dir, "fenced")
	// Built as make image builds the DaemonSet's binary (static, no symbol
	// table, the Makefile's GO_TAGS through GOFLAGS): its memory is the
	// fencer's a user runs.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "fenced.io/fenced/cmd/fenced")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building fenced: %v\n%s", err, out)
	}
	cfg := filepath.Join(s.dir, "fencer.yaml")
	must(t, os.WriteFile(cfg, []byte(s.fencerConfig()), 0o600))
	mp, err := ports.Free("tcp", "127.0.0.1", 1)
	must(t, err)
	metricsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(mp[0]))
	s.metricsURL = "http://" + metricsAddr
	logPath := filepath.Join(s.dir, "fencer.log")
	logFile, err := os.Create(logPath)
	must(t, err)
	cmd := exec.Command(bin, "agent", "--config", cfg, "--kubeconfig", kubeconfig, "--node-name", "fencer-0",
		"--gossip-bind-address", "127.0.0.1", "--gossip-advertise-address", "127.0.0.1",
		"--metrics-address", metricsAddr, "--profiling", "--log-format", "json")
	cmd.Env = append(os.Environ(), "FENCED_BOOT_ID=boot-fencer-0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	must(t, cmd.Start())
	s.pid = cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logFile.Close()
		if keep := os.Getenv("FENCED_BENCH_SCALE_FENCER_LOG"); keep != "" {
			// The fencer's own account of each fence (make bench-scale
			// keeps it beside the table).
			if b, err := os.ReadFile(logPath); err == nil {
				_ = os.WriteFile(keep, b, 0o644)
			}
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				lines := strings.Split(string(b), "\n")
				t.Logf("fencer log (last 60 lines):\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
			}
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for res.toReady == 0 || res.toSynced == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("fencer not ready after 3 min (synced %s, ready %s)", res.toSynced, res.toReady)
		}
		if res.toReady == 0 {
			if r, err := http.Get(s.metricsURL + "/readyz"); err == nil {
				_ = r.Body.Close()
				if r.StatusCode == http.StatusOK {
					res.toReady = time.Since(start)
				}
			}
		}
		if res.toSynced == 0 {
			if b, err := os.ReadFile(logPath); err == nil && strings.Contains(string(b), `"msg":"fencer started"`) {
				res.toSynced = time.Since(start)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("fencer pid %d: informers synced after %s, /readyz after %s", s.pid, res.toSynced.Round(time.Millisecond), res.toReady.Round(time.Millisecond))
}

// atRest measures the fencer over the window after settling: RSS, CPU,
// its API requests (audit log), its BMC requests.
func (s *scenario) atRest(res *results, auditLog string) {
	t := s.t
	t.Logf("settling %s, then measuring the fencer at rest for %s", s.sz.settle, s.sz.window)
	time.Sleep(s.sz.settle)
	cpu0 := procstat.CPUSeconds(s.pid)
	bmc0 := s.metric(`fenced_bmc_requests_total{op="power-status"`)
	challenges0 := s.metric("fenced_liveness_challenges_total")
	start := time.Now()
	var rss, anon []float64
	stop := startProgress(t, "at rest", func() string { return fmt.Sprintf("RSS %.1f MB", procstat.RSSMB(s.pid)) })
	for time.Since(start) < s.sz.window {
		rss = append(rss, procstat.RSSMB(s.pid))
		anon = append(anon, procstat.AnonMB(s.pid))
		time.Sleep(time.Second)
	}
	stop()
	end := time.Now()
	res.restCPU = 100 * (procstat.CPUSeconds(s.pid) - cpu0) / end.Sub(start).Seconds()
	res.restRSS, res.restRSSMax = median(rss), slices.Max(rss)
	res.restAnon, res.restAnonMax = median(anon), slices.Max(anon)
	res.restBMC = s.metric(`fenced_bmc_requests_total{op="power-status"`) - bmc0
	res.restChallenges = s.metric("fenced_liveness_challenges_total") - challenges0
	req, watches := auditCounts(t, auditLog, start, end)
	res.restRequestsPerMin = float64(req) / end.Sub(start).Minutes()
	res.restWatches = watches
	res.startRequests, res.startWatches = auditCounts(t, auditLog, time.Time{}, start)
	res.startVerbs = auditVerbs(t, auditLog, time.Time{}, start)
	if dir := os.Getenv("FENCED_BENCH_SCALE_PROFILES"); dir != "" {
		// After the window, so that taking them costs its figures nothing.
		s.profile(filepath.Join(dir, "bench-scale-heap.pprof"), "/debug/pprof/heap")
		s.profile(filepath.Join(dir, "bench-scale-cpu.pprof"), "/debug/pprof/profile?seconds=20")
	}
}

// profile saves the fencer's profile at path (served with --profiling):
// where its memory and CPU at rest go.
func (s *scenario) profile(file, path string) {
	resp, err := http.Get(s.metricsURL + path)
	if err != nil {
		s.t.Logf("profile %s: %v", path, err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode == http.StatusOK {
		err = os.WriteFile(file, b, 0o644)
	}
	s.t.Logf("profile %s → %s (%d, %v)", path, file, resp.StatusCode, err)
}

// rackDark takes a rack's power away at once: its kubelets stop, its
// gossip members die without a leave, its machines lose power — and, when
// dark, its PDU outlets go off and its BMCs stop answering — then waits
// for every node of the rack to be tainted, sampling the fencer.
func (s *scenario) rackDark(ctx context.Context, label string, rack []string, dark bool, run *rackRun) {
	t := s.t
	run.label, run.dark, run.nodes = label, dark, len(rack)
	alive0 := s.metric(`fenced_members{state="alive"`)
	status0 := s.metric(`fenced_bmc_requests_total{op="power-status",result="ok"`)
	fail0 := s.metric(`fenced_bmc_requests_total{op="power-status"`) - status0
	cpu0 := procstat.CPUSeconds(s.pid)
	t0 := time.Now()
	s.kubelets.powerOff(rack...)
	for _, n := range rack {
		if dark {
			s.pdu.SetOutlet(s.outlet[n], false)
		}
		must(t, s.bmcs[n].PowerLoss())
		if dark {
			s.bmcs[n].Freeze()
		}
		_ = s.rings[n].Shutdown()
	}
	t.Logf("rack %s (%d nodes) dark at %s (BMCs dark: %v)", label, len(rack), t0.Format(time.TimeOnly), dark)

	deadline := t0.Add(s.sz.taintTimeout)
	left := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, name := range rack {
			if _, ok := s.tainted[name]; !ok {
				n++
			}
		}
		return n
	}
	stop := startProgress(t, "rack "+label+" dark", func() string {
		return fmt.Sprintf("%d/%d tainted, %v reads in flight, %v waiting", len(rack)-left(), len(rack),
			s.metric("fenced_power_reads_in_flight"), s.metric("fenced_power_reads_waiting"))
	})
	defer stop()
	for left() > 0 {
		if time.Now().After(deadline) {
			t.Errorf("rack %s: %d of %d nodes not tainted after %s", label, left(), len(rack), s.sz.taintTimeout)
			break
		}
		// 0 is a failed scrape (the fencer itself is always alive).
		if alive := s.metric(`fenced_members{state="alive"`); run.allDead == 0 && alive > 0 && alive0-alive >= float64(len(rack)) {
			run.allDead = time.Since(t0)
		}
		run.maxInFlight = max(run.maxInFlight, s.metric("fenced_power_reads_in_flight"))
		run.maxWaiting = max(run.maxWaiting, s.metric("fenced_power_reads_waiting"))
		run.maxRSS = max(run.maxRSS, procstat.RSSMB(s.pid))
		leases, err := s.client.CoordinationV1().Leases(leaseNamespace).List(ctx, metav1.ListOptions{})
		must(t, err)
		held := 0
		for _, l := range leases.Items {
			if strings.HasPrefix(l.Name, "fenced-power-") {
				held++
			}
		}
		run.maxPowerLeases = max(run.maxPowerLeases, held)
		time.Sleep(100 * time.Millisecond)
	}
	run.cpuSeconds = procstat.CPUSeconds(s.pid) - cpu0
	s.mu.Lock()
	var times []time.Duration
	for _, n := range rack {
		if at, ok := s.tainted[n]; ok {
			times = append(times, at.Sub(t0))
		}
	}
	s.mu.Unlock()
	slices.Sort(times)
	if len(times) > 0 {
		run.first, run.last, run.median = times[0], times[len(times)-1], times[len(times)/2]
	}
	run.silent = s.stoppedBeating(rack, t0)
	run.statusOK = s.metric(`fenced_bmc_requests_total{op="power-status",result="ok"`) - status0
	run.statusFailed = s.metric(`fenced_bmc_requests_total{op="power-status"`) - run.statusOK - status0 - fail0
	run.powerOffs = s.metric(`fenced_bmc_requests_total{op="power-off"`)
	run.evidence = s.evidenceMethods(ctx, rack)
	bound := float64(s.sz.readBound)
	if bound == 0 {
		bound = fencing.DefaultMaxConcurrentPowerReads
	}
	if run.maxInFlight > bound {
		t.Errorf("rack %s: %v power reads in flight, bound %v", label, run.maxInFlight, bound)
	}
	if run.powerOffs != 0 {
		t.Errorf("rack %s: %v power-off requests; every rack node reads off, nothing may be switched", label, run.powerOffs)
	}
	if most := core.DefaultPolicy().MaxConcurrentPowerActions; run.maxPowerLeases > most {
		t.Errorf("rack %s: %d power Leases at once, maxConcurrentPowerActions %d", label, run.maxPowerLeases, most)
	}
}

// evidenceMethods counts the rack's taints by evidence method and level.
func (s *scenario) evidenceMethods(ctx context.Context, rack []string) map[string]int {
	out := map[string]int{}
	for _, name := range rack {
		n, err := s.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		must(s.t, err)
		ev, ok, err := taint.EvidenceOf(n)
		if !ok || err != nil {
			continue
		}
		key := string(ev.Method)
		switch {
		case ev.BMC != nil && ev.BMC.Level > 0:
			key += fmt.Sprintf(" (level %d: %s)", ev.BMC.Level, ev.BMC.Power)
		case ev.BMC != nil:
			key += fmt.Sprintf(" (BMC: %s)", ev.BMC.Power)
		}
		out[key]++
	}
	return out
}

// checkTaints asserts the safety rules over the whole run: taints only on
// nodes that lost power, every one with evidence.
func (s *scenario) checkTaints() {
	s.mu.Lock()
	defer s.mu.Unlock()
	off := map[string]bool{}
	for _, n := range s.lost() {
		off[n] = true
	}
	for n := range s.tainted {
		if !off[n] {
			s.t.Errorf("TAINT ON A NODE THAT IS NOT OFF: %s", n)
		}
	}
	for _, b := range s.badEv {
		s.t.Errorf("TAINT WITHOUT EVIDENCE: %s", b)
	}
}

// floodBeats sends the fencer, every beat interval, a beat in the name of
// every Node that has no gossip member here — so that it receives the
// beats of a 1000-node cluster while the test process holds only the
// ring's members. They go through all of a real beat's path in the
// fencer (its UDP socket, the beat opened with the gossip key, the member
// looked up) but the Detector's update: those names
// are no members of its ring, so their beats are dropped. The fencer runs
// in a process of its own, so its CPU figures are its share alone.
func (s *scenario) floodBeats(ctx context.Context, res *results) {
	members := map[string]bool{}
	for _, n := range s.memberNames {
		members[n] = true
	}
	var names []string
	for _, n := range s.names() {
		if !members[n] {
			names = append(names, n)
		}
	}
	f, err := hostile.New(gossipKey, "scale")
	must(s.t, err)
	s.t.Cleanup(func() { _ = f.Close() })
	to := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.gossipPort))
	// Sealed as agents seal them for a fencer that reads sealed beats (once
	// per name: the fencer's work is the same).
	msgs := make([][]byte, len(names))
	for i, n := range names {
		msgs[i], err = heartbeat.SealBeat(gossipKey, "scale", n)
		must(s.t, err)
	}
	// Five at a time, spread over the interval, as evenly as the beats of
	// many agents with timers of their own arrive: ten bursts an interval
	// woke the fencer less often than a real cluster's beats do.
	const per = 5
	parts := (len(msgs) + per - 1) / per
	go func() {
		t := time.NewTicker(heartbeat.DefaultBeatInterval / time.Duration(parts))
		defer t.Stop()
		for i := 0; ; i = (i + 1) % parts {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for _, m := range msgs[min(i*per, len(msgs)):min((i+1)*per, len(msgs))] {
				_ = f.Datagram(to, m)
			}
		}
	}()
	res.beatsPerSecond = float64(len(s.memberNames)+len(names)) / heartbeat.DefaultBeatInterval.Seconds()
}

// stoppedBeating returns, sorted, how long after t0 the fencer logged
// that each node of rack stopped beating.
func (s *scenario) stoppedBeating(rack []string, t0 time.Time) []time.Duration {
	b, err := os.ReadFile(filepath.Join(s.dir, "fencer.log"))
	must(s.t, err)
	in := map[string]bool{}
	for _, n := range rack {
		in[n] = true
	}
	first := map[string]time.Duration{}
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			Time      time.Time
			Msg, Node string
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Msg != "gossip member stopped beating" || !in[e.Node] || e.Time.Before(t0) {
			continue
		}
		if _, seen := first[e.Node]; !seen {
			first[e.Node] = e.Time.Sub(t0)
		}
	}
	return slices.Sorted(maps.Values(first))
}

// falseDeaths counts the fencer's log lines that declare dead a member
// that never lost power.
func (s *scenario) falseDeaths() int {
	b, err := os.ReadFile(filepath.Join(s.dir, "fencer.log"))
	must(s.t, err)
	off := map[string]bool{}
	for _, n := range s.lost() {
		off[n] = true
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		var e struct{ Msg, Node, To string }
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "gossip member state changed" && e.To == string(vocab.MemberDead) && !off[e.Node] {
			n++
		}
	}
	return n
}

// metric sums the samples of the fencer's /metrics whose line starts with
// prefix (a name, or a name and the start of its labels).
func (s *scenario) metric(prefix string) float64 {
	r, err := http.Get(s.metricsURL + "/metrics")
	if err != nil {
		return 0
	}
	defer r.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		rest := line[len(prefix):]
		if rest != "" && rest[0] != ' ' && rest[0] != '{' && rest[0] != ',' && rest[0] != '}' {
			continue // a longer name
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// rackRun is one rack's figures.
type rackRun struct {
	label               string
	dark                bool
	nodes               int
	first, median, last time.Duration
	// allDead is when the fencer's ring saw the whole rack dead.
	allDead time.Duration
	// silent is when the fencer logged each rack node's beats stopped,
	// sorted (its Detector's share of the detection).
	silent                  []time.Duration
	maxInFlight, maxWaiting float64
	maxRSS                  float64
	cpuSeconds              float64
	statusOK, statusFailed  float64
	powerOffs               float64
	maxPowerLeases          int
	evidence                map[string]int
}

type results struct {
	size                         size
	toSynced, toReady            time.Duration
	restRSS, restRSSMax, restCPU float64
	restAnon, restAnonMax        float64
	restRequestsPerMin           float64
	restWatches                  int
	restBMC, restChallenges      float64
	startRequests, startWatches  int
	startVerbs                   string
	falseDeaths                  int
	beatsPerSecond               float64
	runs                         [3]rackRun
	renewals, renewFailures      int64
}

func (r *results) print(t *testing.T) {
	t.Helper()
	sz := r.size
	bound := sz.readBound
	if bound == 0 {
		bound = fencing.DefaultMaxConcurrentPowerReads
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fencer at scale (%s): %d Nodes, racks of %d, %d gossip members besides the fencer, maxConcurrentPowerReads %d, policy.mode power-off\n\n",
		sz.name, sz.nodes, sz.rack, 2*sz.rack+sz.members, bound)
	b.WriteString("| at rest | figure |\n|---|---|\n")
	fmt.Fprintf(&b, "| fencer start → informers synced / → /readyz (in the ring) | %s / %s |\n", r.toSynced.Round(time.Millisecond), r.toReady.Round(time.Millisecond))
	fmt.Fprintf(&b, "| fencer RSS over %s at rest | median %.1f MB, max %.1f MB |\n", sz.window, r.restRSS, r.restRSSMax)
	fmt.Fprintf(&b, "| of which anonymous (heap, stacks; the rest is the executable's pages) | median %.1f MB, max %.1f MB |\n", r.restAnon, r.restAnonMax)
	fmt.Fprintf(&b, "| fencer CPU at rest | %.1f %% of one core |\n", r.restCPU)
	fmt.Fprintf(&b, "| beats the fencer receives at rest | %.0f a second (its ring's members', and the beats of the other Nodes' names — no members of its ring, so read and dropped) |\n", r.beatsPerSecond)
	fmt.Fprintf(&b, "| fencer API requests at rest (audit log) | %.1f per minute (%d watches opened) |\n", r.restRequestsPerMin, r.restWatches)
	fmt.Fprintf(&b, "| fencer API requests from start to rest | %d (%s), %d watches |\n", r.startRequests, r.startVerbs, r.startWatches)
	fmt.Fprintf(&b, "| BMC reads at rest | %.0f (device monitor rounds only) |\n", r.restBMC)
	fmt.Fprintf(&b, "| liveness challenges at rest (beats late) | %.0f |\n", r.restChallenges)
	fmt.Fprintf(&b, "| gossip deaths of members outside the racks (false, in the fencer's view) over the run | %d |\n", r.falseDeaths)
	fmt.Fprintf(&b, "| simulated kubelet Lease renewals over the run | %d (%d failed) |\n\n", r.renewals, r.renewFailures)
	b.WriteString("| power lost | beats stopped (first / median / last) | whole rack dead in gossip | first taint | median | last taint | reads in flight (max) | waiting (max) | reads ok / failed | power-offs | power Leases (max) | fencer RSS max | fencer CPU | evidence |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range r.runs {
		what := fmt.Sprintf("rack %s, %d nodes, BMCs up (read off)", run.label, run.nodes)
		if run.nodes == 1 {
			what = "one node, BMC up (read off)"
		}
		if run.dark {
			what = fmt.Sprintf("rack %s, %d nodes, BMCs dark, PDU outlets off", run.label, run.nodes)
		}
		var ev []string
		for _, k := range slices.Sorted(maps.Keys(run.evidence)) {
			ev = append(ev, fmt.Sprintf("%d× %s", run.evidence[k], k))
		}
		silent := "—"
		if n := len(run.silent); n > 0 {
			silent = fmt.Sprintf("%s / %s / %s (%d)", run.silent[0].Round(100*time.Millisecond), run.silent[n/2].Round(100*time.Millisecond),
				run.silent[n-1].Round(100*time.Millisecond), n)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.0f | %.0f | %.0f / %.0f | %.0f | %d | %.1f MB | %.1f s |  %s |\n", what, silent, run.allDead.Round(100*time.Millisecond),
			run.first.Round(100*time.Millisecond), run.median.Round(100*time.Millisecond), run.last.Round(100*time.Millisecond),
			run.maxInFlight, run.maxWaiting, run.statusOK, run.statusFailed, run.powerOffs, run.maxPowerLeases, run.maxRSS, run.cpuSeconds, strings.Join(ev, ", "))
	}
	t.Log("\n" + b.String())
	if out := os.Getenv(figuresEnv); out != "" {
		f := soak.ScaleFigures{RestCPUPercent: r.restCPU, RestRSSMB: r.restRSS, RestAnonMB: r.restAnon}
		for _, run := range r.runs {
			k := soak.RackFigures{Label: run.label, Nodes: run.nodes, First: run.first, Median: run.median, Last: run.last}
			if n := len(run.silent); n > 0 {
				k.BeatsStopped = run.silent[n-1]
			}
			f.Racks = append(f.Racks, k)
		}
		raw, err := json.Marshal(f)
		must(t, err)
		must(t, os.MkdirAll(filepath.Dir(out), 0o755))
		must(t, os.WriteFile(out, raw, 0o644))
	}
	if out := os.Getenv(outEnv); out != "" {
		must(t, os.MkdirAll(filepath.Dir(out), 0o755))
		must(t, os.WriteFile(out, []byte(b.String()), 0o644))
		t.Logf("written to %s", out)
	}
}
