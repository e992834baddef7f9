package device

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// rackAgent is the fake agent as a PDU of outlets 1..n in a directory of
// its own; off are the outlets that are off.
func rackAgent(t *testing.T, behavior string, n int, off ...int) (*FenceAgent, string) {
	t.Helper()
	dir := t.TempDir()
	for i := 1; i <= n; i++ {
		setOutlet(t, dir, i, !slices.Contains(off, i))
	}
	return fakeAgent(t, behavior, map[string]string{"statedir": dir}, 30*time.Second), dir
}

func setOutlet(t *testing.T, dir string, i int, on bool) {
	t.Helper()
	state := "OFF"
	if on {
		state = "ON"
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("outlet-%d", i)), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
}

// statusRuns are the agent's runs so far, each "action plug", but for
// the outlet lists of the check of off readings (plugcheck.go).
func statusRuns(t *testing.T, dir string) []string {
	t.Helper()
	return slices.DeleteFunc(runs(t, dir), func(r string) bool { return r == "list" })
}

// runs are the agent's runs so far, each "action plug".
func runs(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "runs"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var r []string
	for line := range strings.Lines(string(b)) {
		r = append(r, strings.TrimSpace(line))
	}
	return r
}

// readAll reads outlets 1..n of a at once, the first alone before the
// others ask (so that they share the next run), and returns their states.
func readAll(t *testing.T, a *FenceAgent, dir string, n int) map[int]vocab.PowerState {
	t.Helper()
	got := map[int]vocab.PowerState{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			s, err := a.Plug(fmt.Sprintf("worker-%d", i), fmt.Sprint(i)).PowerState(context.Background())
			if err != nil {
				t.Errorf("outlet %d: %v", i, err)
			}
			mu.Lock()
			got[i] = s
			mu.Unlock()
		})
		if i == 1 {
			waitRuns(t, dir, len(statusRuns(t, dir))+1) // the first read's run has begun
		}
	}
	wg.Wait()
	return got
}

// TestSharedStatusOneRunForARack: twelve outlets read at once cost two
// runs of the agent — the first read's own status, then one list-status
// for the eleven that asked meanwhile — and each gets its own outlet's
// state; a read alone is a plain status run.
func TestSharedStatusOneRunForARack(t *testing.T) {
	off := []int{2, 3, 5, 7, 11}
	a, dir := rackAgent(t, "rack", 12, off...)
	got := readAll(t, a, dir, 12)
	for i := 1; i <= 12; i++ {
		if want := stateOf(!slices.Contains(off, i)); got[i] != want {
			t.Errorf("outlet %d: %s, want %s", i, got[i], want)
		}
	}
	if r := statusRuns(t, dir); !slices.Equal(r, []string{"status 1", "list-status"}) {
		t.Errorf("runs %q, want the first read's status, then one list-status", r)
	}

	// Alone: a plain status.
	if s, err := a.Plug("worker-5", "5").PowerState(context.Background()); s != vocab.PowerOff || err != nil {
		t.Fatalf("outlet 5 alone: %s, %v", s, err)
	}
	if r := statusRuns(t, dir); r[len(r)-1] != "status 5" {
		t.Errorf("a read alone ran %q, want a status of its plug", r[len(r)-1])
	}
}

// TestSharedStatusAgentWithoutStates: an agent whose list-status prints
// no states (ClusterLabs' SNMP agents) is read plug by plug — every read
// still gets its own outlet's state — and list-status is not run again.
func TestSharedStatusAgentWithoutStates(t *testing.T) {
	off := []int{1, 4}
	a, dir := rackAgent(t, "rack-nostate", 6, off...)
	for round := range 2 {
		before := len(statusRuns(t, dir))
		got := readAll(t, a, dir, 6)
		for i := 1; i <= 6; i++ {
			if want := stateOf(!slices.Contains(off, i)); got[i] != want {
				t.Errorf("round %d: outlet %d: %s, want %s", round, i, got[i], want)
			}
		}
		r := statusRuns(t, dir)[before:]
		if lists := slices.Index(r, "list-status"); (round == 0) != (lists >= 0) || len(r) != 6+(1-round) {
			t.Errorf("round %d: runs %q, want one status each (and one list-status in the first round only)", round, r)
		}
	}
}

func stateOf(on bool) vocab.PowerState {
	if on {
		return vocab.PowerOn
	}
	return vocab.PowerOff
}

// TestSharedStatusNeverFromARunBegunBefore: a read never takes its answer
// from a run that began before it asked — that run may have read the
// outlet before the change the read is about. Outlet 4 goes off while a
// list-status for outlets 2 and 3 is under way (its outlets read as it
// began): the read of outlet 4 asked after waits for the next run, and
// sees off.
func TestSharedStatusNeverFromARunBegunBefore(t *testing.T) {
	a, dir := rackAgent(t, "rack", 6, 2, 3)
	ctx := context.Background()
	var wg sync.WaitGroup
	read := func(i int, into *vocab.PowerState) {
		wg.Go(func() {
			s, err := a.Plug(fmt.Sprintf("worker-%d", i), fmt.Sprint(i)).PowerState(ctx)
			if err != nil {
				t.Errorf("outlet %d: %v", i, err)
			}
			*into = s
		})
	}
	var s1, s2, s3, s4 vocab.PowerState
	read(1, &s1)
	waitRuns(t, dir, 1) // status 1 under way
	read(2, &s2)
	read(3, &s3)
	waitRuns(t, dir, 2) // the run for 2 and 3 under way, outlets read
	setOutlet(t, dir, 4, false)
	read(4, &s4)
	wg.Wait()
	if s1 != vocab.PowerOn || s2 != vocab.PowerOff || s3 != vocab.PowerOff {
		t.Errorf("outlets 1-3: %s %s %s, want on off off", s1, s2, s3)
	}
	if s4 != vocab.PowerOff {
		t.Fatalf("outlet 4, switched off before it was read: %s (runs %q)", s4, statusRuns(t, dir))
	}
	if r := statusRuns(t, dir); !slices.Equal(r, []string{"status 1", "list-status", "status 4"}) {
		t.Errorf("runs %q", r)
	}
}

// TestSharedStatusFailsEveryWaiter: a list-status that times out fails
// every read that waited for it, each naming its node and plug — without
// a timeout each after the other — and none is taken as off.
func TestSharedStatusFailsEveryWaiter(t *testing.T) {
	a, dir := rackAgent(t, "rack", 4)
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := 1; i <= 4; i++ {
		wg.Go(func() {
			s, err := a.Plug(fmt.Sprintf("worker-%d", i), fmt.Sprint(i)).PowerState(context.Background())
			if s == vocab.PowerOff {
				t.Errorf("outlet %d read off", i)
			}
			errs[i] = err
		})
		if i == 1 {
			waitRuns(t, dir, 1)
			if err := os.WriteFile(filepath.Join(dir, "broken"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	for i := 2; i <= 4; i++ {
		if errs[i] == nil || !strings.Contains(errs[i].Error(), fmt.Sprintf("worker-%d", i)) || KindOf(errs[i]) != vocab.KindTimeout {
			t.Errorf("outlet %d: %v, want a timeout naming worker-%d", i, errs[i], i)
		}
	}
	if r := statusRuns(t, dir); len(r) != 2 {
		t.Errorf("runs %q, want the first read's and one shared", r)
	}
}

func TestParseListStatus(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      map[string]vocab.PowerState
	}{
		{"ids and aliases", "1,worker-1,ON\n2,worker-2,OFF\n", map[string]vocab.PowerState{
			"1": vocab.PowerOn, "worker-1": vocab.PowerOn, "2": vocab.PowerOff, "worker-2": vocab.PowerOff}},
		{"an alias with the separator", "3,server 3, rack b,OFF\n", map[string]vocab.PowerState{"3": vocab.PowerOff, "server 3, rack b": vocab.PowerOff}},
		{"unknown and odd lines left out", "1,a,UNKNOWN\nNOTICE: List option is not working on this device yet\n2,b\n\n3,,on\n",
			map[string]vocab.PowerState{"3": vocab.PowerOn}},
		{"an alias two outlets share is no name", "1,db,ON\n2,db,OFF\n", map[string]vocab.PowerState{"1": vocab.PowerOn, "2": vocab.PowerOff}},
		{"an ID listed twice: nothing taken from the list", "1,a,ON\n1,b,OFF\n2,c,ON\n", map[string]vocab.PowerState{}},
		{"an alias that is another outlet's ID names that outlet", "1,2,OFF\n2,x,ON\n", map[string]vocab.PowerState{"1": vocab.PowerOff, "2": vocab.PowerOn, "x": vocab.PowerOn}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseListStatus([]byte(tc.out), ","); !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// waitRuns waits until the agent has started n runs.
func waitRuns(t *testing.T, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(statusRuns(t, dir)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the agent started %d status runs in a minute, want %d", len(statusRuns(t, dir)), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOffReadingOfAnUnlistedPlugIsNoEvidence: an outlet the PDU lacks
// reads off (as fence_apc_snmp reads it); the device's own list does not
// name it, so the reading is an error of kind no-such-plug, never off. A
// listed plug's off reading stands, the list read once for both reads of
// a listed plug and again for the unlisted one (an outlet may have been
// added or renamed since).
func TestOffReadingOfAnUnlistedPlugIsNoEvidence(t *testing.T) {
	a, dir := rackAgent(t, "rack", 6, 3)
	ctx := context.Background()
	for range 2 {
		if s, err := a.Plug("worker-3", "3").PowerState(ctx); s != vocab.PowerOff || err != nil {
			t.Fatalf("listed outlet 3: %s, %v", s, err)
		}
	}
	if s, err := a.Plug("worker-9", "server 3").PowerState(ctx); s != vocab.PowerOff || err != nil {
		t.Fatalf("outlet 3 by its alias: %s, %v", s, err)
	}
	lists := func() int { return len(runs(t, dir)) - len(statusRuns(t, dir)) }
	if n := lists(); n != 1 {
		t.Errorf("%d list runs for listed plugs, want 1 (runs %q)", n, runs(t, dir))
	}
	s, err := a.Plug("worker-9", "9").PowerState(ctx)
	if s == vocab.PowerOff || KindOf(err) != vocab.KindNoSuchPlug || !strings.Contains(err.Error(), "worker-9") {
		t.Fatalf("outlet 9 of a 6-outlet PDU: %s, %v (kind %q); want no-such-plug naming worker-9", s, err, KindOf(err))
	}
	t.Logf("%v", err)
	if n := lists(); n != 2 {
		t.Errorf("%d list runs, want the list read again for the unlisted plug", n)
	}
	// Added since: listed on the next read.
	setOutlet(t, dir, 9, false)
	if s, err := a.Plug("worker-9", "9").PowerState(ctx); s != vocab.PowerOff || err != nil {
		t.Fatalf("outlet 9 once the PDU lists it: %s, %v", s, err)
	}
}
