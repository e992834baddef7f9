package pdusim

import (
	"errors"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func requireIntegration(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs snmpd and fence_apc_snmp (run without -short)")
	}
}

// agentResult is one run of ClusterLabs' fence_apc_snmp.
type agentResult struct {
	exit   int
	stdout string
	stderr string
}

// runAgent runs fence_apc_snmp with options on stdin, the way Pacemaker
// and fenced's fence-agent driver do.
func runAgent(t *testing.T, p *PDU, opts ...string) agentResult {
	t.Helper()
	if _, err := exec.LookPath("fence_apc_snmp"); err != nil {
		t.Fatal("fence_apc_snmp not found: install Debian's fence-agents package (hack/install-deps.sh does)")
	}
	lines := append([]string{"ip=" + p.Host, "ipport=" + strconv.Itoa(p.Port)}, opts...)
	cmd := exec.Command("fence_apc_snmp")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := agentResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.exit = exit.ExitCode()
	default:
		t.Fatalf("running fence_apc_snmp: %v", err)
	}
	return res
}

// recorder collects OnChange callbacks.
type recorder struct {
	mu      sync.Mutex
	changes []string
}

func (r *recorder) record(outlet int, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, strconv.Itoa(outlet)+"="+strconv.FormatBool(on))
}

func (r *recorder) waitFor(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		got := slices.Clone(r.changes)
		r.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("OnChange saw %v, want %v", got, want)
		}
		time.Sleep(watchInterval)
	}
}

func TestFenceAPCSNMP(t *testing.T) {
	requireIntegration(t)
	p := Start(t, Options{Outlets: 4, Off: []int{2}, Names: []string{"worker-1", "worker-2"}})
	var rec recorder
	p.OnChange(rec.record)
	community := "community=" + p.Community

	for _, tc := range []struct {
		name     string
		opts     []string
		wantExit int
		wantOut  string
	}{
		{"status of an outlet that is on", []string{"action=status", community, "plug=1"}, 0, "Status: ON"},
		{"status of an outlet that is off", []string{"action=status", community, "plug=2"}, 2, "Status: OFF"},
		{"plug given by outlet name", []string{"action=status", community, "plug=worker-2"}, 2, "Status: OFF"},
		{"list", []string{"action=list", community}, 0, "1,worker-1\n2,worker-2\n3,outlet-3\n4,outlet-4\n"},
		{"monitor", []string{"action=monitor", community}, 0, ""},
		{"snmp v1", []string{"action=status", community, "snmp_version=1", "plug=1"}, 0, "Status: ON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runAgent(t, p, tc.opts...)
			if res.exit != tc.wantExit || !strings.Contains(res.stdout, tc.wantOut) {
				t.Fatalf("exit %d, stdout %q (stderr %q); want exit %d, stdout with %q",
					res.exit, res.stdout, res.stderr, tc.wantExit, tc.wantOut)
			}
		})
	}

	t.Run("off and on switch the outlet", func(t *testing.T) {
		if res := runAgent(t, p, "action=off", community, "plug=3"); res.exit != 0 || !strings.Contains(res.stdout, "Success: Powered OFF") {
			t.Fatalf("off: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
		}
		if p.Outlet(3) {
			t.Fatal("outlet 3 still on after fence_apc_snmp off")
		}
		if v, err := p.SNMPGet(OIDOutletState + ".3"); err != nil || v != "2" {
			t.Fatalf("snmpget outlet 3 = %q, %v; want 2 (off)", v, err)
		}
		if res := runAgent(t, p, "action=status", community, "plug=3"); res.exit != 2 {
			t.Fatalf("status after off: exit %d, stdout %q", res.exit, res.stdout)
		}
		if res := runAgent(t, p, "action=on", community, "plug=3"); res.exit != 0 || !strings.Contains(res.stdout, "Success: Powered ON") {
			t.Fatalf("on: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
		}
		if !p.Outlet(3) {
			t.Fatal("outlet 3 still off after fence_apc_snmp on")
		}
		rec.waitFor(t, "3=false", "3=true")
	})

	t.Run("wrong community gets no answer", func(t *testing.T) {
		res := runAgent(t, p, "action=status", "community=not-"+p.Community, "plug=1")
		if res.exit == 0 || res.exit == 2 || !strings.Contains(res.stderr, "Timeout: No Response") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want an error exit and snmpget's timeout", res.exit, res.stdout, res.stderr)
		}
	})
}

func TestFenceAPCSNMPv3(t *testing.T) {
	requireIntegration(t)
	p := Start(t, Options{Outlets: 2, Off: []int{2}, V3User: "fencer"})
	v3 := func(auth string) []string {
		return []string{"snmp_version=3", "username=" + p.V3User, "password=" + auth,
			"snmp_priv_passwd=" + p.V3PrivPassword, "snmp_auth_prot=SHA", "snmp_priv_prot=AES", "snmp_sec_level=authPriv"}
	}
	if res := runAgent(t, p, append(v3(p.V3AuthPassword), "action=status", "plug=2")...); res.exit != 2 {
		t.Fatalf("v3 status of an off outlet: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
	}
	res := runAgent(t, p, append(v3("not-"+p.V3AuthPassword), "action=status", "plug=2")...)
	if res.exit == 0 || res.exit == 2 || !strings.Contains(res.stderr, "Authentication failure") {
		t.Fatalf("wrong v3 password: exit %d, stdout %q, stderr %q; want an authentication failure", res.exit, res.stdout, res.stderr)
	}
}

func TestSetOutlet(t *testing.T) {
	requireIntegration(t)
	p := Start(t, Options{Outlets: 3})
	var rec recorder
	p.OnChange(rec.record)
	for _, tc := range []struct {
		outlet int
		on     bool
		want   string
	}{
		{2, false, "2"},
		{2, false, "2"}, // no change, no callback
		{1, false, "2"},
		{2, true, "1"},
	} {
		p.SetOutlet(tc.outlet, tc.on)
		if got, err := p.SNMPGet(OIDOutletState + "." + strconv.Itoa(tc.outlet)); err != nil || got != tc.want {
			t.Fatalf("after SetOutlet(%d, %v): snmpget = %q, %v; want %s", tc.outlet, tc.on, got, err, tc.want)
		}
		if p.Outlet(tc.outlet) != tc.on {
			t.Fatalf("Outlet(%d) = %v after SetOutlet", tc.outlet, !tc.on)
		}
	}
	// SetOutlet runs the callbacks before it returns.
	rec.waitFor(t, "2=false", "1=false", "2=true")
	if got, err := p.SNMPGet(OIDOutletName + ".3"); err != nil || got != `"outlet-3"` {
		t.Fatalf("snmpget outlet 3 name = %q, %v", got, err)
	}
	if got, err := p.SNMPGet(".1.3.6.1.2.1.1.2.0"); err != nil || got != SysObjectID {
		t.Fatalf("sysObjectID = %q, %v; want %s", got, err, SysObjectID)
	}
}
