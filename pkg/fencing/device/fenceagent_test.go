package device

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

const fakeSecret = "s3cr3t-Pa55"

// fakeAgent builds the driver on testdata/fenceagent/fence_fake with
// behavior picking what the fake does.
func fakeAgent(t *testing.T, behavior string, extra map[string]string, timeout time.Duration) *FenceAgent {
	t.Helper()
	options := map[string]string{"ip": "192.0.2.10", "username": "fencer", "behavior": behavior}
	for k, v := range extra {
		options[k] = v
	}
	a, err := NewFenceAgent(context.Background(), FenceAgentOptions{
		DriverOptions: DriverOptions{Node: "pdu-1", Timeout: timeout},
		Agent:         testAgent(t, "fence_fake"),
		Options:       options,
		Secrets:       map[string]func() (string, error){"password": staticPassword(fakeSecret)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func testAgent(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "fenceagent", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFenceAgentStatus(t *testing.T) {
	for _, tc := range []struct {
		behavior string
		want     vocab.PowerState
		kind     vocab.ErrorKind // "" when no error is wanted
	}{
		{"on", vocab.PowerOn, ""},
		{"off", vocab.PowerOff, ""},
		{"exit2-silent", vocab.PowerUnknown, vocab.KindBMC},
		{"exit2-says-on", vocab.PowerUnknown, vocab.KindBMC},
		{"exit0-says-off", vocab.PowerUnknown, vocab.KindBMC},
		{"login", vocab.PowerUnknown, vocab.KindAuth},
		{"snmp-timeout", vocab.PowerUnknown, vocab.KindTimeout},
		{"exit5", vocab.PowerUnknown, vocab.KindBMC},
		{"garbage", vocab.PowerUnknown, vocab.KindBMC},
		{"signal", vocab.PowerUnknown, vocab.KindBMC},
		{"echo-password", vocab.PowerUnknown, vocab.KindBMC},
	} {
		t.Run(tc.behavior, func(t *testing.T) {
			a := fakeAgent(t, tc.behavior, nil, 10*time.Second)
			for _, b := range []BMC{a.Plug("worker-1", "7"), nil} {
				var (
					got vocab.PowerState
					err error
				)
				if b != nil {
					got, err = b.PowerState(context.Background())
				} else {
					got, err = a.Status(context.Background(), "7")
				}
				if got != tc.want || KindOf(err) != tc.kind || (tc.kind == "") != (err == nil) {
					t.Fatalf("got %s, %v (kind %q); want %s, kind %q", got, err, KindOf(err), tc.want, tc.kind)
				}
				if err != nil && strings.Contains(err.Error(), fakeSecret) {
					t.Fatalf("error leaks the password: %v", err)
				}
			}
		})
	}
}

func TestFenceAgentErrorNamesPlugAndRedacts(t *testing.T) {
	a := fakeAgent(t, "echo-password", nil, 10*time.Second)
	_, err := a.Plug("worker-1", "7").PowerState(context.Background())
	msg := err.Error()
	for _, want := range []string{"worker-1", "fence_fake://192.0.2.10/7", "wrong password '<redacted>' for plug 7", "exit code 1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

func TestFenceAgentActions(t *testing.T) {
	on := fakeAgent(t, "on", nil, 10*time.Second)
	ctx := context.Background()
	for name, f := range map[string]func() error{
		"off":     func() error { return on.Off(ctx, "1") },
		"on":      func() error { return on.On(ctx, "1") },
		"monitor": func() error { return on.Monitor(ctx) },
		"cycle":   func() error { return on.Plug("worker-1", "1").PowerCycle(ctx) },
	} {
		if err := f(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := fakeAgent(t, "login", nil, 10*time.Second).Off(ctx, "1"); KindOf(err) != vocab.KindAuth {
		t.Errorf("off with a refused login: %v, want kind auth", err)
	}
	if _, err := on.Plug("worker-1", "1").SystemGUID(ctx); KindOf(err) != vocab.KindNotSupported {
		t.Errorf("SystemGUID: %v, want kind not-supported", err)
	}
	plugs, err := fakeAgent(t, "list", nil, 10*time.Second).List(ctx)
	want := []FencePlug{{"1", "worker-1"}, {"2", "worker-2"}, {"3", ""}}
	if err != nil || fmt.Sprint(plugs) != fmt.Sprint(want) {
		t.Fatalf("List = %v, %v; want %v", plugs, err, want)
	}
}

func TestFenceAgentValidation(t *testing.T) {
	fake := testAgent(t, "fence_fake")
	secret := map[string]func() (string, error){"password": staticPassword(fakeSecret)}
	for _, tc := range []struct {
		name    string
		opts    FenceAgentOptions
		wantErr string // "" when valid
	}{
		{"valid", FenceAgentOptions{Agent: fake, Options: map[string]string{"ip": "x"}, Secrets: secret}, ""},
		{"deprecated alias satisfies a required option", FenceAgentOptions{Agent: fake, Options: map[string]string{"ipaddr": "x"}}, ""},
		{"unknown option", FenceAgentOptions{Agent: fake, Options: map[string]string{"ip": "x", "comunity": "y"}}, `unknown option "comunity"`},
		{"unknown secret", FenceAgentOptions{Agent: fake, Options: map[string]string{"ip": "x"},
			Secrets: map[string]func() (string, error){"passwd": staticPassword("p")}}, `unknown option "passwd"`},
		{"required option missing", FenceAgentOptions{Agent: fake, Options: map[string]string{"username": "u"}}, `required option "ip" missing`},
		{"action is fenced's", FenceAgentOptions{Agent: fake, Options: map[string]string{"ip": "x", "action": "off"}}, `option "action" is set by fenced`},
		{"plug is fenced's", FenceAgentOptions{Agent: fake, Options: map[string]string{"ip": "x", "port": "3"}}, `option "port" is set by fenced`},
		{"password in plain options", FenceAgentOptions{Agent: fake, Options: map[string]string{"ip": "x", "password": "p"}}, `option "password" is a credential`},
		{"line break in a value", FenceAgentOptions{Agent: fake, Options: map[string]string{"ip": "x\naction=off"}}, "line break"},
		{"agent not found", FenceAgentOptions{Agent: "fence_does_not_exist"}, "not found"},
		{"agent not executable", FenceAgentOptions{Agent: testAgent(t, "metadata.xml")}, "is not an executable file"},
		{"malformed metadata", FenceAgentOptions{Agent: testAgent(t, "fence_badmeta")}, "malformed metadata XML"},
		{"no status action", FenceAgentOptions{Agent: testAgent(t, "fence_nostatus")}, "no status action"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFenceAgent(context.Background(), tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("NewFenceAgent: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewFenceAgent error %v; want one with %q", err, tc.wantErr)
			}
		})
	}
}

// TestFenceAgentHangKillsGroup checks a hanging agent is killed with the
// children it started, and that the timeout is an error, not off.
func TestFenceAgentHangKillsGroup(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pids")
	a := fakeAgent(t, "hang", map[string]string{"pidfile": pidfile}, 500*time.Millisecond)
	start := time.Now()
	got, err := a.Plug("worker-1", "3").PowerState(context.Background())
	if got != vocab.PowerUnknown || KindOf(err) != vocab.KindTimeout {
		t.Fatalf("hanging agent: %s, %v; want unknown and a timeout", got, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("run took %s with a 500ms timeout", d)
	}
	b, rerr := os.ReadFile(pidfile)
	if rerr != nil {
		t.Fatal(rerr)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		t.Fatalf("pidfile %q", b)
	}
	leader, _ := strconv.Atoi(fields[0])
	child, _ := strconv.Atoi(fields[1])
	for _, pid := range []int{leader, child} {
		if alive(pid) {
			t.Errorf("process %d of the agent still alive after the timeout", pid)
		}
	}
	if members := groupMembers(t, leader); len(members) > 0 {
		t.Errorf("process group %d still has live members %v", leader, members)
	}
}

// TestFenceAgentContextEndKillsGroup: the caller's context ending kills
// the run too.
func TestFenceAgentContextEndKillsGroup(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pids")
	a := fakeAgent(t, "hang", map[string]string{"pidfile": pidfile}, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitFile(t, pidfile)
		cancel()
	}()
	if _, err := a.Status(ctx, "3"); KindOf(err) != vocab.KindTimeout {
		t.Fatalf("canceled run: %v; want a timeout", err)
	}
	b, _ := os.ReadFile(pidfile)
	leader, _ := strconv.Atoi(strings.Fields(string(b))[0])
	if members := groupMembers(t, leader); len(members) > 0 {
		t.Errorf("process group %d still has live members %v", leader, members)
	}
}

// TestFenceAgentSecretNotInArgvOrEnv reads /proc of the running agent.
func TestFenceAgentSecretNotInArgvOrEnv(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	a := fakeAgent(t, "wait-file", map[string]string{"pidfile": pidfile}, 20*time.Second)
	type result struct {
		state vocab.PowerState
		err   error
	}
	done := make(chan result, 1)
	go func() {
		s, err := a.Status(context.Background(), "1")
		done <- result{s, err}
	}()
	waitFile(t, pidfile)
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	for _, f := range []string{"cmdline", "environ"} {
		content, err := os.ReadFile(filepath.Join("/proc", pid, f))
		if err != nil {
			t.Fatal(err)
		}
		if len(content) == 0 {
			t.Fatalf("/proc/%s/%s is empty: the agent is not running", pid, f)
		}
		if bytes.Contains(content, []byte(fakeSecret)) {
			t.Errorf("/proc/%s/%s contains the password", pid, f)
		}
	}
	if err := os.WriteFile(pidfile+".go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.state != vocab.PowerOn || r.err != nil {
		t.Fatalf("Status = %s, %v", r.state, r.err)
	}
}

func TestCappedBuffer(t *testing.T) {
	for _, tc := range []struct {
		writes []string
		want   string
	}{
		{[]string{"abc"}, "abc"},
		{[]string{"abcd"}, "abcd"},
		{[]string{"abcde"}, "abcd...(truncated)"},
		{[]string{"ab", "cd", "e"}, "abcd...(truncated)"},
	} {
		b := &cappedBuffer{limit: 4}
		for _, w := range tc.writes {
			if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if got := string(b.Bytes()); got != tc.want {
			t.Errorf("writes %q: %q, want %q", tc.writes, got, tc.want)
		}
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s not written", path)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procStat returns a process' state letter and process group from
// /proc/PID/stat; ok is false when it is gone.
func procStat(pid int) (state string, pgrp int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	// Fields after the parenthesised command name: state, ppid, pgrp, …
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 3 {
		return "", 0, false
	}
	pgrp, _ = strconv.Atoi(f[2])
	return f[0], pgrp, true
}

// alive reports whether pid exists and is not a zombie (a killed child
// reparented to a PID 1 that does not reap stays a zombie).
func alive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
}

// groupMembers lists the live processes of process group pgid.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var members []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, pgrp, ok := procStat(pid); ok && pgrp == pgid && alive(pid) {
			members = append(members, pid)
		}
	}
	return members
}

func TestAgentMessage(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"2026-11-23 09:05:29,536 ERROR: Failed: Unable to obtain correct plug status or plug is not available\n\n\n2026-11-23 09:05:29,536 ERROR: Please use '-h' for usage\n",
			"ERROR: Failed: Unable to obtain correct plug status or plug is not available"},
		{"first\nsecond\n", "first; second"},
		{"\n  \n", ""},
	} {
		if got := agentMessage([]byte(c.in)); got != c.want {
			t.Errorf("agentMessage(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
