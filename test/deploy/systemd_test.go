package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fenced.io/fenced/pkg/fencing/core"
)

const unitFile = "deploy/systemd/fenced.service"

// unit is a parsed unit file: section -> key -> values in order (a key may
// repeat). Comments and blank lines are dropped; no line continuations are
// used in fenced.service.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, data []byte) unit {
	t.Helper()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, `\`) {
				t.Fatalf("%s:%d: not a KEY=VALUE line in a section: %q", unitFile, n, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u
}

// last is the effective value of a key (systemd: the last one wins).
func (u unit) last(section, key string) (string, bool) {
	vs := u[section][key]
	if len(vs) == 0 {
		return "", false
	}
	return vs[len(vs)-1], true
}

// TestSystemdUnitSettings pins what the unit promises (docs/design.md §3, the
// README): a hardening option dropped by mistake fails here, by name.
func TestSystemdUnitSettings(t *testing.T) {
	u := parseUnit(t, readFile(t, unitFile))
	want := map[string]map[string]string{
		"Unit": {"Wants": "network-online.target"},
		"Service": {
			"Type": "notify", "NotifyAccess": "main", "WatchdogSec": "30s",
			"Restart": "on-failure", "RestartSec": "5s",
			"EnvironmentFile":       "-/etc/default/fenced",
			"User":                  "fenced",
			"CapabilityBoundingSet": "", "AmbientCapabilities": "",
			"NoNewPrivileges": "true", "ProtectSystem": "strict", "ProtectHome": "true", "PrivateTmp": "true",
			"ProtectKernelTunables": "true", "ProtectKernelModules": "true", "ProtectKernelLogs": "true",
			"ProtectControlGroups":    "true",
			"RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
			"RestrictNamespaces":      "true", "LockPersonality": "true", "MemoryDenyWriteExecute": "true",
			"SystemCallFilter": "@system-service",
		},
		"Install": {"WantedBy": "multi-user.target"},
	}
	for section, kv := range want {
		for k, v := range kv {
			if got, ok := u.last(section, k); !ok || got != v {
				t.Errorf("[%s] %s=%q (set: %v), want %q", section, k, got, ok, v)
			}
		}
	}
	// Started after the kubelet (so never holding up its start: see the
	// unit's comment on why not Before=).
	after := strings.Fields(strings.Join(u["Unit"]["After"], " "))
	for _, w := range []string{"network-online.target", "kubelet.service"} {
		if !slices.Contains(after, w) {
			t.Errorf("After=%v lacks %s", after, w)
		}
	}
	if b := u["Unit"]["Before"]; len(b) > 0 {
		t.Errorf("Before=%v: ordering before the kubelet stalls a kubeadm control plane's boot (deploy/systemd/README.md, Shutdown ordering)", b)
	}
	// ProcSubset=pid would hide /proc/sys/kernel/random/boot_id.
	if v, ok := u.last("Service", "ProcSubset"); ok && v != "all" {
		t.Errorf("ProcSubset=%s hides the boot ID the agent must read", v)
	}
	// No path may be made writable: the agent writes nothing.
	for _, k := range []string{"ReadWritePaths", "StateDirectory", "RuntimeDirectory", "LogsDirectory"} {
		if vs := u["Service"][k]; len(vs) > 0 {
			t.Errorf("%s=%v: the agent writes no files; what needs it?", k, vs)
		}
	}
}

// TestSystemdEnvExample: fenced.env.example is what EnvironmentFile= reads —
// KEY=VALUE lines, here all commented out — and the variables it documents
// are ones the agent (NODE_NAME, FENCED_BMC_PASSWORD via passwordEnv) or the
// unit's ExecStart (FENCED_AGENT_ARGS) use.
func TestSystemdEnvExample(t *testing.T) {
	known := []string{"NODE_NAME", "FENCED_AGENT_ARGS", "FENCED_BMC_PASSWORD"}
	assign := regexp.MustCompile(`^#?([A-Z][A-Z0-9_]*)=`)
	var seen []string
	for i, line := range strings.Split(string(readFile(t, "deploy/systemd/fenced.env.example")), "\n") {
		if line == "" || (strings.HasPrefix(line, "#") && !assign.MatchString(line)) {
			continue
		}
		m := assign.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("line %d: neither a comment nor KEY=VALUE: %q", i+1, line)
			continue
		}
		if !slices.Contains(known, m[1]) {
			t.Errorf("line %d: %s is not a variable fenced or its unit reads", i+1, m[1])
		}
		seen = append(seen, m[1])
	}
	for _, k := range known {
		if !slices.Contains(seen, k) {
			t.Errorf("%s is not documented", k)
		}
	}
	exec, _ := parseUnit(t, readFile(t, unitFile)).last("Service", "ExecStart")
	if !strings.Contains(exec, "$FENCED_AGENT_ARGS") {
		t.Errorf("ExecStart=%s does not pass $FENCED_AGENT_ARGS", exec)
	}
}

// systemdAnalyze returns the path of systemd-analyze, failing (not
// skipping) when it is missing: it is an install dependency of the tests.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: install it with `apt-get install systemd` " +
			"(the Debian package systemd; hack/install-deps.sh installs it)")
	}
	return p
}

var (
	buildOnce sync.Once
	fencedBin string
	buildErr  error
	buildOut  []byte
)

// fencedBinary builds ./cmd/fenced once per test binary; TestMain removes it.
func fencedBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "fenced-deploy-test.")
		if err != nil {
			buildErr = err
			return
		}
		fencedBin = filepath.Join(dir, "fenced")
		cmd := exec.Command(goTool, "build", "-o", fencedBin, "./cmd/fenced")
		cmd.Dir = repoRoot(t)
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/fenced: %v\n%s", buildErr, buildOut)
	}
	return fencedBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fencedBin != "" {
		os.RemoveAll(filepath.Dir(fencedBin))
	}
	os.Exit(code)
}

// TestSystemdUnitVerifies runs `systemd-analyze verify` on the unit and
// checks the agent accepts its ExecStart flags.
//
// verify refuses a unit whose ExecStart binary does not exist, and
// /usr/local/bin/fenced does not exist on a build machine. So the test
// verifies a temp copy whose ExecStart runs a freshly built fenced instead —
// a real binary, not /bin/true, so that the flags can be checked against
// `fenced agent --help` too. Nothing else in the copy changes. verify
// reports most mistakes (an unknown key, a bad time span) as warnings while
// exiting 0, so any output fails the test.
func TestSystemdUnitVerifies(t *testing.T) {
	bin := fencedBinary(t)
	data := readFile(t, unitFile)

	u := parseUnit(t, data)
	execStart, _ := u.last("Service", "ExecStart")
	args := strings.Fields(execStart)
	if len(args) < 2 || args[0] != "/usr/local/bin/fenced" || args[1] != "agent" {
		t.Fatalf("ExecStart=%s; want /usr/local/bin/fenced agent …", execStart)
	}
	help, stderr, err := run(t, nil, bin, "agent", "--help")
	if err != nil {
		t.Fatalf("fenced agent --help: %v\n%s", err, stderr)
	}
	flags := regexp.MustCompile(`(?m)^\s+(?:-\w, )?(--[a-z0-9-]+)`).FindAllStringSubmatch(help, -1)
	var known []string
	for _, f := range flags {
		known = append(known, f[1])
	}
	for _, a := range args[2:] {
		if name, _, _ := strings.Cut(a, "="); strings.HasPrefix(name, "--") && !slices.Contains(known, name) {
			t.Errorf("ExecStart passes %s, which `fenced agent` does not know (it knows %v)", name, known)
		}
	}

	// The exposure score as systemd rates it, offline: 1.7 today ("OK").
	// A ceiling of 2.0 leaves room for other systemd versions' weights and
	// catches a sandbox option lost wholesale.
	if score, report := verifyUnit(t, data, nil); score > 2.0 {
		t.Errorf("systemd-analyze security rates the unit %.1f; it was 1.7:\n%s", score, report)
	}
}

// verifyUnit runs `systemd-analyze verify` on a temp copy of the unit (its
// ExecStart running a freshly built fenced) with dropIns in its .d
// directory (file name → content), fails on any output, and returns the
// exposure score `systemd-analyze security` gives it offline, with the
// report.
func verifyUnit(t *testing.T, unit []byte, dropIns map[string][]byte) (float64, string) {
	t.Helper()
	analyze, bin := systemdAnalyze(t), fencedBinary(t)
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "fenced.service")
	patched := bytes.Replace(unit, []byte("ExecStart=/usr/local/bin/fenced "), []byte("ExecStart="+bin+" "), 1)
	if err := os.WriteFile(copyPath, patched, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, content := range dropIns {
		if err := os.MkdirAll(copyPath+".d", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copyPath+".d", name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, err := run(t, nil, analyze, "verify", copyPath)
	if err != nil || strings.TrimSpace(stdout+stderr) != "" {
		t.Fatalf("systemd-analyze verify %s with drop-ins %v: %v\n%s%s", unitFile, dropIns, err, stdout, stderr)
	}
	stdout, stderr, err = run(t, nil, analyze, "security", "--offline=yes", copyPath)
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, stderr)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no exposure level in systemd-analyze security output:\n%s", stdout)
	}
	score, _ := strconv.ParseFloat(m[1], 64)
	return score, stdout
}

// TestSystemdWatchdogDropIn: the drop-in for hosts fenced on their
// watchdog verifies with the unit, opens the host's devices to the
// watchdog alone (the exposure barely moves), restarts a crashed agent well
// within the default watchdog timeout, and its udev rule gives the unit's
// group the devices it names.
func TestSystemdWatchdogDropIn(t *testing.T) {
	unitData := readFile(t, unitFile)
	dropIn := readFile(t, "deploy/systemd/watchdog.conf")
	score, report := verifyUnit(t, unitData, map[string][]byte{"watchdog.conf": dropIn})
	if score > 2.2 {
		t.Errorf("with the watchdog drop-in systemd-analyze security rates the unit %.1f:\n%s", score, report)
	}
	t.Logf("exposure with the drop-in: %.1f", score)
	d := parseUnit(t, dropIn)
	for key, want := range map[string]string{"PrivateDevices": "false", "DevicePolicy": "closed", "DeviceAllow": "/dev/watchdog0 rw"} {
		if got, _ := d.last("Service", key); got != want {
			t.Errorf("watchdog.conf: %s=%s, want %s", key, got, want)
		}
	}
	restart, _ := d.last("Service", "RestartSec")
	if r, err := time.ParseDuration(restart); err != nil || r*5 > core.DefaultWatchdogTimeout {
		t.Errorf("watchdog.conf: RestartSec=%s (%v): a crashed agent must be back well within the watchdog's %s", restart, err, core.DefaultWatchdogTimeout)
	}
	group, _ := parseUnit(t, unitData).last("Service", "Group")
	rule := strings.TrimSpace(lastLine(string(readFile(t, "deploy/systemd/60-fenced-watchdog.rules"))))
	if rule != `KERNEL=="watchdog*", GROUP="`+group+`", MODE="0660"` {
		t.Errorf("60-fenced-watchdog.rules: %q, want group %s read-write on watchdog*", rule, group)
	}
}

// lastLine is the last non-empty line of text.
func lastLine(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	return lines[len(lines)-1]
}
