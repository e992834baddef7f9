package soak

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/taint"
	"fenced.io/fenced/pkg/vocab"
)

func testPlan() Plan {
	return Plan{
		Targets: map[Kind][]string{
			PowerLoss: {"w-1", "w-2", "w-3"}, Hang: {"w-1", "w-2", "w-3"}, BMCDown: {"w-3"},
			FencerRestart: {"cp-2"},
		},
		Weights:       map[Kind]int{PowerLoss: 2},
		MaxConcurrent: 2,
		MinHold:       time.Second, MaxHold: 3 * time.Second, MaxGap: time.Second,
	}
}

func TestSchedulerReplaysFromItsSeed(t *testing.T) {
	draw := func(seed uint64) []Fault {
		s := NewScheduler(testPlan(), seed)
		var out []Fault
		for range 50 {
			f, ok := s.Next()
			if !ok {
				t.Fatalf("no fault with every machine free")
			}
			out = append(out, f)
			s.Done(f)
		}
		return out
	}
	a, b, c := draw(7), draw(7), draw(8)
	if !equalFaults(a, b) {
		t.Fatal("the same seed gave different faults")
	}
	if equalFaults(a, c) {
		t.Fatal("different seeds gave the same 50 faults")
	}
	for _, f := range a {
		if f.Hold < time.Second || f.Hold > 3*time.Second {
			t.Errorf("%v: hold %s outside [1s, 3s]", f, f.Hold)
		}
		if !contains(testPlan().Targets[f.Kind], f.Machine) {
			t.Errorf("%v: machine not a target of its kind", f)
		}
	}
}

func equalFaults(a, b []Fault) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestSchedulerFirstKinds(t *testing.T) {
	p := testPlan()
	p.First = []Kind{Hang, FencerRestart, BMCDown}
	s := NewScheduler(p, 3)
	for i, want := range p.First {
		f, ok := s.Next()
		if !ok || f.Kind != want {
			t.Fatalf("fault %d: %v (%v), want %s", i+1, f, ok, want)
		}
		s.Done(f)
	}
}

// TestSchedulerBoundsAndReplays runs schedulers whose faults recover at
// different paces: none ever has more than MaxConcurrent machines faulted
// or one machine faulted twice, and with the same seed all start the same
// faults in the same order.
func TestSchedulerBoundsAndReplays(t *testing.T) {
	run := func(recoverEvery int) []Fault {
		s := NewScheduler(testPlan(), 11)
		var started, active []Fault
		for step := 0; len(started) < 40; step++ {
			if f, ok := s.Next(); ok {
				started = append(started, f)
				active = append(active, f)
			}
			machines, seen := 0, map[string]bool{}
			for _, f := range active {
				if seen[f.Machine] {
					t.Fatalf("step %d: %s faulted twice: %v", step, f.Machine, active)
				}
				seen[f.Machine] = true
				if f.Kind != FencerRestart {
					machines++
				}
			}
			if machines > 2 {
				t.Fatalf("step %d: %d machines faulted, MaxConcurrent 2: %v", step, machines, active)
			}
			if step%recoverEvery == 0 && len(active) > 0 {
				s.Done(active[0])
				active = active[1:]
			}
		}
		return started
	}
	a, b := run(1), run(5)
	if !equalFaults(a, b) {
		t.Fatalf("same seed, other recovery pace, other faults:\n%v\n%v", a, b)
	}
}

// node is a Node with fenced's taint and evidence ev (nil: none), or
// untainted when tainted is false.
func node(t *testing.T, name string, tainted, appliedBy bool, ev *core.Evidence) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if tainted {
		n.Spec.Taints = []corev1.Taint{{Key: taint.TaintKey, Value: taint.TaintValue, Effect: corev1.TaintEffectNoExecute}}
	}
	if appliedBy {
		n.Annotations[taint.AnnotationAppliedBy] = "cp-1"
	}
	if ev != nil {
		raw, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[taint.AnnotationEvidence] = string(raw)
	}
	return n
}

func TestChecker(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	offReading := &core.Reading{Power: vocab.PowerOff, At: at, Endpoint: "198.18.0.1:623"}
	good := &core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "cp-1", At: at, BootID: "boot-1", BMC: offReading}
	noReading := &core.Evidence{Method: vocab.EvidenceBMCPowerOff, By: "cp-1", At: at, BootID: "boot-1"}
	tests := []struct {
		name     string
		node     *corev1.Node
		live     bool
		want     Invariant // "" = no violation
		withEv   int
		tainted  bool
		notTaint bool // the node is observed untainted afterwards
	}{
		{name: "taint with evidence on a machine that is off", node: node(t, "w-1", true, true, good), withEv: 1, tainted: true},
		{name: "taint with evidence on a live machine", node: node(t, "w-1", true, true, good), live: true, want: TaintOnLiveMachine, withEv: 1, tainted: true},
		{name: "taint without applied-by", node: node(t, "w-1", true, false, good), want: TaintWithoutEvidence, tainted: true},
		{name: "taint without evidence annotation", node: node(t, "w-1", true, true, nil), want: TaintWithoutEvidence, tainted: true},
		{name: "taint with evidence that does not validate", node: node(t, "w-1", true, true, noReading), want: TaintWithoutEvidence, tainted: true},
		{name: "untainted node", node: node(t, "w-1", false, false, nil)},
		{name: "taint then removed", node: node(t, "w-1", true, true, good), withEv: 1, tainted: true, notTaint: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := 0
			c := NewChecker(func(string, core.Evidence) (bool, string) { asked++; return tt.live, "test" })
			c.ObserveNode(tt.node)
			c.ObserveNode(tt.node) // an update that changes nothing is not a new taint
			if got := c.TaintsWithEvidence(); got != tt.withEv {
				t.Errorf("taints with evidence %d, want %d", got, tt.withEv)
			}
			if asked != tt.withEv {
				t.Errorf("asked live %d times, want %d", asked, tt.withEv)
			}
			vs := c.Violations()
			switch {
			case tt.want == "" && len(vs) > 0:
				t.Errorf("violations %v, want none", vs)
			case tt.want != "" && (len(vs) != 1 || vs[0].Invariant != tt.want):
				t.Errorf("violations %v, want one %q", vs, tt.want)
			}
			since, ok := c.TaintedSince("w-1")
			if ok != tt.tainted {
				t.Fatalf("tainted %v, want %v", ok, tt.tainted)
			}
			if !tt.notTaint {
				return
			}
			c.ObserveNode(node(t, "w-1", false, false, nil))
			if _, ok := c.TaintedSince("w-1"); ok {
				t.Fatal("still tainted after an untainted update")
			}
			if _, ok := c.UntaintedAfter("w-1", since); !ok {
				t.Fatal("no removal recorded")
			}
			if first, ok := c.TaintedAfter("w-1", since); !ok || !first.Equal(since) {
				t.Fatalf("TaintedAfter %v %v, want %v", first, ok, since)
			}
		})
	}
}

func lease(holder string, acquired, renewed time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "fenced-power-w-1"}}
	if holder != "" {
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: ptr.To(metav1.NewMicroTime(acquired)), RenewTime: ptr.To(metav1.NewMicroTime(renewed))}
	}
	return l
}

func TestCheckerLeaseTakeover(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		old, cur *coordinationv1.Lease
		overlap  bool
	}{
		{"renewal by the holder", lease("cp-1", t0, t0), lease("cp-1", t0, t0.Add(5*time.Second)), false},
		{"taken over after expiry", lease("cp-1", t0, t0), lease("cp-2", t0.Add(16*time.Second), t0.Add(16*time.Second)), false},
		{"taken over before expiry", lease("cp-1", t0, t0.Add(5*time.Second)), lease("cp-2", t0.Add(10*time.Second), t0.Add(10*time.Second)), true},
		{"released, then taken", lease("", t0, t0), lease("cp-2", t0.Add(time.Second), t0.Add(time.Second)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewChecker(nil)
			c.ObserveLeaseChange(tt.old, tt.cur)
			if got := c.Count(OverlappingWriters) > 0; got != tt.overlap {
				t.Fatalf("overlap %v, want %v: %v", got, tt.overlap, c.Violations())
			}
		})
	}
}

func TestSummary(t *testing.T) {
	s := Summary{Seed: 42, Duration: time.Hour, Machines: 7,
		Faults:             map[Kind]int{PowerLoss: 3, Hang: 1},
		TaintsWithEvidence: 3,
		FenceTimes:         Durations{6 * time.Second, 5 * time.Second, 9 * time.Second, 7 * time.Second},
		Agents: []Agent{
			{Machine: "cp-1", Continuous: true, Goroutines: Level{100, 105}, RSS: Level{40 << 20, 50 << 20}},
			{Machine: "w-1"},
		},
	}
	if p50, mx := s.FenceTimes.P50(), s.FenceTimes.Max(); p50 != 6*time.Second || mx != 9*time.Second {
		t.Fatalf("p50 %s max %s, want 6s 9s", p50, mx)
	}
	var b bytes.Buffer
	s.Write(&b)
	out := b.String()
	for _, want := range []string{"SOAK_SEED=42", "| faults injected | 4 (power-loss 3, hang 1) |", "| taints without evidence | 0 |",
		"4, p50 6.0 s, max 9.0 s", "100 → 105 (+5.0 %)", "+25.0 % **> 10 %**", "| w-1 | restarted during the run"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if s.Failed() {
		t.Fatal("failed without violations")
	}
	s.Violations = []Violation{{At: time.Now(), Invariant: TaintLeftBehind, Node: "w-2", Detail: "still tainted"}}
	b.Reset()
	s.Write(&b)
	if !s.Failed() || !strings.Contains(b.String(), "| taints left behind after recovery | **1 — FAIL** |") {
		t.Fatalf("a violation is not a failure:\n%s", b.String())
	}
}

func TestReadMatrix(t *testing.T) {
	stream := `{"Action":"start","Package":"fenced.io/fenced/test/e2e"}
{"Action":"run","Test":"TestA"}
{"Action":"output","Test":"TestA","Output":"x\n"}
{"Action":"pass","Test":"TestA/sub","Elapsed":1}
{"Action":"pass","Test":"TestA","Elapsed":60}
{"Action":"skip","Test":"TestBench","Elapsed":0}
{"Action":"fail","Test":"TestA/sub","Elapsed":1}
{"Action":"fail","Test":"TestA","Elapsed":80}
{"Action":"skip","Test":"TestBench","Elapsed":0}
{"Action":"fail","Package":"fenced.io/fenced/test/e2e","Elapsed":150}
`
	m, err := ReadMatrix(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if m.Runs != 2 || len(m.Tests) != 2 || !m.Failed() {
		t.Fatalf("matrix %+v", m)
	}
	a := m.Tests[0]
	if a.Name != "TestA" || a.Passed() != 1 || a.Failed() != 1 || a.Times.Max() != 80*time.Second || len(a.Failures) != 1 || a.Failures[0] != "run 2: sub" {
		t.Fatalf("TestA %+v", a)
	}
	// A test whose parallel subtests run after its function returned:
	// its time is from its run to its result, not its Elapsed.
	wall, err := ReadMatrix(strings.NewReader(`{"Time":"2026-11-26T06:00:00Z","Action":"run","Test":"TestP"}
{"Time":"2026-11-26T06:00:05Z","Action":"run","Test":"TestP/sub"}
{"Time":"2026-11-26T06:01:35Z","Action":"pass","Test":"TestP/sub","Elapsed":90}
{"Time":"2026-11-26T06:01:35Z","Action":"pass","Test":"TestP","Elapsed":5}
`))
	if err != nil || wall.Tests[0].Times.Max() != 95*time.Second {
		t.Fatalf("TestP took %v (%v), want 95s", wall.Tests[0].Times, err)
	}
	var b bytes.Buffer
	m.Write(&b)
	for _, want := range []string{"| TestA | 1 | 1 | 60 / 80 | pass fail |", "| **all** | 1 | 1 | | |", "FAIL TestA run 2: sub"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
