package device

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/vocab"
)

// FenceAgentOptions configures a power device reached through a ClusterLabs
// fence agent (fence_apc_snmp, fence_ipmilan, fence_virsh, …): one device,
// such as a PDU, that switches many plugs.
type FenceAgentOptions struct {
	// DriverOptions: Node names the device's owner in errors (a plug
	// handle names its own node); Timeout bounds one run of the agent
	// (0: DefaultFenceAgentTimeout); Retries is how many more runs
	// follow a run that timed out.
	DriverOptions
	// Agent is the agent's path, or its name looked up in PATH and the
	// sbin directories where Debian installs the agents.
	Agent string
	// Options are the agent's options (ip, ipport, username, snmp_version,
	// …) as its metadata names them. action and plug/port are fenced's to
	// set per request; secrets belong in Secrets.
	Options map[string]string
	// Secrets are options whose values are credentials (password,
	// community, snmp_priv_passwd, …). Each is read for every run, so a
	// rotated secret file takes effect without a restart, and is redacted
	// from every error.
	Secrets map[string]func() (string, error)
}

// Operations of a fence device beyond the BMC ones of pkg/fencing/core.
const (
	OpMonitor  = "monitor"
	OpList     = "list"
	OpMetadata = "metadata"
)

// The fence agent API's actions (ClusterLabs FenceAgentAPI.md).
const (
	actionStatus   = "status"
	actionOn       = "on"
	actionOff      = "off"
	actionReboot   = "reboot"
	actionMonitor  = "monitor"
	actionList     = "list"
	actionMetadata = "metadata"
)

// The agent API's exit codes for status: 0 on, 2 off. Every other code,
// and 0 or 2 from an agent that did not run to its end, is an error.
const (
	exitStatusOn  = 0
	exitStatusOff = 2
)

// maxAgentOutput caps what is kept of an agent's stdout and stderr each.
const maxAgentOutput = 64 << 10

// agentEnv is the whole environment of an agent: fenced's own environment
// is not passed on, and nothing secret is ever put into it (another
// process of the same user can read /proc/PID/environ).
var agentEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8"}

// FenceAgent runs a ClusterLabs fence agent through its standard
// interface: options as key=value lines on stdin, never in argv or the
// environment; the exit code of action=status says on (0) or off (2). Each
// request is one run of the agent in its own process group, which is
// killed whole when the run times out or its context ends.
//
// It reports PowerOff only when the agent ran to its end, exited 2 on
// status and printed "Status: OFF" (as every agent built on ClusterLabs'
// fencing.py does); a timeout, a signal, any other exit code or a
// contradicting output is an error.
type FenceAgent struct {
	opts     FenceAgentOptions
	path     string
	name     string // the agent's base name, for errors
	plugKey  string // "plug", or "port" for agents that only know that
	endpoint string
	canList  bool
	mu       sync.Mutex
	// canListStatus: status reads of this device's plugs share runs of
	// list-status (sharedstatus.go), busy and next being that sharing's.
	canListStatus bool
	busy          bool
	next          *statusBatch
	// outlets is what the device's list last said (plugcheck.go).
	outlets outletList
	// snmp reads the outlets of an APC rack PDU without the agent
	// (apcsnmp.go); nil: every read is a run of the agent.
	snmp *apcSNMP
}

// FencePlug is one plug an agent's list action reports: an outlet number,
// a VM name, … and its alias where the device has one.
type FencePlug struct {
	ID    string
	Alias string
}

// NewFenceAgent finds the agent, reads its metadata and checks the
// configured options against it: an option the agent does not know, an
// option fenced sets itself, a secret given in plain Options or a missing
// required option is an error naming it. It does not contact the device.
func NewFenceAgent(ctx context.Context, opts FenceAgentOptions) (*FenceAgent, error) {
	if opts.Agent == "" {
		return nil, errors.New("fence-agent: no agent given")
	}
	path, err := config.FindFenceAgent(opts.Agent)
	if err != nil {
		return nil, fmt.Errorf("fence-agent: %w", err)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultFenceAgentTimeout
	}
	a := &FenceAgent{opts: opts, path: path, name: filepath.Base(path)}
	a.endpoint = agentEndpoint(a.name, opts.Options)
	md, err := a.metadata(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.validate(md); err != nil {
		return nil, fmt.Errorf("fence-agent %s: %w", a.name, err)
	}
	a.snmp = newAPCSNMP(a.name, opts.Options, opts.Secrets)
	return a, nil
}

// agentEndpoint names the device in errors: agent://ip[:ipport].
func agentEndpoint(name string, options map[string]string) string {
	host := options["ip"]
	if host == "" {
		host = options["ipaddr"]
	}
	if host == "" {
		return name
	}
	if port := options["ipport"]; port != "" {
		host += ":" + port
	}
	return name + "://" + host
}

// agentMetadata is the part of an agent's metadata XML that fenced reads.
type agentMetadata struct {
	XMLName    xml.Name `xml:"resource-agent"`
	Name       string   `xml:"name,attr"`
	Parameters []struct {
		Name       string `xml:"name,attr"`
		Required   string `xml:"required,attr"`
		Deprecated string `xml:"deprecated,attr"`
		Obsoletes  string `xml:"obsoletes,attr"`
	} `xml:"parameters>parameter"`
	Actions []struct {
		Name string `xml:"name,attr"`
	} `xml:"actions>action"`
}

// metadata runs action=metadata and parses its XML.
func (a *FenceAgent) metadata(ctx context.Context) (*agentMetadata, error) {
	res, err := a.exec(ctx, a.opts.Node, "", OpMetadata, "action="+actionMetadata+"\n", nil)
	if err != nil {
		return nil, err
	}
	if res.exit != 0 {
		return nil, a.fail(OpMetadata, vocab.KindNotSupported, res.failure("metadata"), nil)
	}
	var md agentMetadata
	if err := xml.Unmarshal(res.stdout, &md); err != nil {
		return nil, a.fail(OpMetadata, vocab.KindNotSupported, fmt.Errorf("malformed metadata XML: %w", err), nil)
	}
	if len(md.Parameters) == 0 {
		return nil, a.fail(OpMetadata, vocab.KindNotSupported, errors.New("metadata lists no parameters"), nil)
	}
	return &md, nil
}

// setByFenced are the options fenced writes per request.
var setByFenced = []string{"action", "plug", "port", "nodename"}

// secretName matches option names that carry credentials.
var secretName = regexp.MustCompile(`(?i)passw|community|secret|token`)

func (a *FenceAgent) validate(md *agentMetadata) error {
	known := map[string]bool{}
	alias := map[string][]string{} // name → the names it obsoletes or that obsolete it
	for _, p := range md.Parameters {
		known[p.Name] = true
		if p.Obsoletes != "" {
			alias[p.Name] = append(alias[p.Name], p.Obsoletes)
			alias[p.Obsoletes] = append(alias[p.Obsoletes], p.Name)
		}
	}
	switch {
	case known["plug"]:
		a.plugKey = "plug"
	case known["port"]:
		a.plugKey = "port"
	}
	if !slices.ContainsFunc(md.Actions, func(x struct {
		Name string `xml:"name,attr"`
	}) bool {
		return x.Name == actionStatus
	}) {
		return errors.New("its metadata lists no status action: it cannot read power")
	}
	a.canList = slices.ContainsFunc(md.Actions, func(x struct {
		Name string `xml:"name,attr"`
	}) bool {
		return x.Name == actionList
	})
	a.canListStatus = slices.ContainsFunc(md.Actions, func(x struct {
		Name string `xml:"name,attr"`
	}) bool {
		return x.Name == actionListStatus
	})

	configured := map[string]bool{}
	check := func(name string) error {
		if slices.Contains(setByFenced, name) {
			return fmt.Errorf("option %q is set by fenced for each request, not in the configuration", name)
		}
		if !known[name] {
			return fmt.Errorf("unknown option %q (the agent's metadata does not list it)", name)
		}
		if configured[name] {
			return fmt.Errorf("option %q given both as an option and as a secret", name)
		}
		configured[name] = true
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(a.opts.Options)) {
		if err := check(name); err != nil {
			return err
		}
		if secretName.MatchString(name) && !strings.Contains(name, "script") {
			return fmt.Errorf("option %q is a credential: give it as a secret, not in plain options", name)
		}
		if v := a.opts.Options[name]; strings.ContainsAny(v, "\n\r\x00") {
			return fmt.Errorf("option %q: value has a line break or NUL", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(a.opts.Secrets)) {
		if err := check(name); err != nil {
			return err
		}
	}
	for _, p := range md.Parameters {
		if p.Required != "1" || p.Deprecated == "1" || slices.Contains(setByFenced, p.Name) || configured[p.Name] {
			continue
		}
		if slices.ContainsFunc(alias[p.Name], func(n string) bool { return configured[n] }) {
			continue
		}
		return fmt.Errorf("required option %q missing", p.Name)
	}
	return nil
}

// Status reads the power of plug: PowerOn or PowerOff, or an error.
func (a *FenceAgent) Status(ctx context.Context, plug string) (vocab.PowerState, error) {
	return a.status(ctx, a.opts.Node, plug)
}

func (a *FenceAgent) status(ctx context.Context, node, plug string) (vocab.PowerState, error) {
	res, secrets, err := a.run(ctx, node, vocab.OpPowerStatus, actionStatus, plug)
	if err != nil {
		return vocab.PowerUnknown, err
	}
	says := statusLine.FindAllSubmatch(res.stdout, -1)
	saysOff := slices.ContainsFunc(says, func(m [][]byte) bool { return strings.EqualFold(string(m[1]), "off") })
	saysOn := slices.ContainsFunc(says, func(m [][]byte) bool { return strings.EqualFold(string(m[1]), "on") })
	switch {
	case res.exit == exitStatusOn && !saysOff:
		return vocab.PowerOn, nil
	case res.exit == exitStatusOff && saysOff && !saysOn:
		return vocab.PowerOff, nil
	case res.exit == exitStatusOff:
		// fencing.py only exits 2 after printing the status; python itself
		// exits 2 on its own usage errors. Not evidence.
		return vocab.PowerUnknown, a.failPlug(node, plug, vocab.OpPowerStatus, vocab.KindBMC,
			fmt.Errorf("exit code 2 without a sole \"Status: OFF\" on stdout, not taken as off: %w", res.failure(actionStatus)), secrets)
	case res.exit == exitStatusOn:
		return vocab.PowerUnknown, a.failPlug(node, plug, vocab.OpPowerStatus, vocab.KindBMC,
			fmt.Errorf("exit code 0 but stdout says off: %w", res.failure(actionStatus)), secrets)
	}
	return vocab.PowerUnknown, a.failPlug(node, plug, vocab.OpPowerStatus, classifyAgent(res.stderr), res.failure(actionStatus), secrets)
}

// statusLine is how fencing.py prints the result of status.
var statusLine = regexp.MustCompile(`(?mi)^Status: (ON|OFF)\s*$`)

// Off switches plug off (the agent waits until it reads off).
func (a *FenceAgent) Off(ctx context.Context, plug string) error {
	return a.action(ctx, a.opts.Node, vocab.OpPowerOff, actionOff, plug)
}

// On switches plug on.
func (a *FenceAgent) On(ctx context.Context, plug string) error {
	return a.action(ctx, a.opts.Node, vocab.OpPowerOn, actionOn, plug)
}

// Monitor checks that the device answers with the configured credentials
// (Pacemaker's monitor operation), and reads its outlet list again for
// the check of off readings (plugcheck.go), so that a fence rarely waits
// for it.
func (a *FenceAgent) Monitor(ctx context.Context) error {
	if err := a.action(ctx, a.opts.Node, OpMonitor, actionMonitor, ""); err != nil {
		return err
	}
	if a.canList {
		// Its failure is the check's to report, when an off reading needs it.
		_, _ = a.outletNames(ctx, true)
	}
	return nil
}

func (a *FenceAgent) action(ctx context.Context, node, op, action, plug string) error {
	res, secrets, err := a.run(ctx, node, op, action, plug)
	if err != nil {
		return err
	}
	if res.exit != 0 {
		return a.failPlug(node, plug, op, classifyAgent(res.stderr), res.failure(action), secrets)
	}
	return nil
}

// List returns the plugs the device reports ("ID,alias" lines).
func (a *FenceAgent) List(ctx context.Context) ([]FencePlug, error) {
	if !a.canList {
		return nil, a.fail(OpList, vocab.KindNotSupported, errors.New("the agent has no list action"), nil)
	}
	res, secrets, err := a.run(ctx, a.opts.Node, OpList, actionList, "")
	if err != nil {
		return nil, err
	}
	if res.exit != 0 {
		return nil, a.fail(OpList, classifyAgent(res.stderr), res.failure(actionList), secrets)
	}
	var plugs []FencePlug
	for line := range strings.Lines(string(res.stdout)) {
		line = strings.TrimSpace(line)
		if line == "" || line == "N/A" || strings.HasPrefix(line, "NOTICE:") {
			continue
		}
		id, alias, _ := strings.Cut(line, ",")
		plugs = append(plugs, FencePlug{ID: id, Alias: alias})
	}
	return plugs, nil
}

// Plug returns the BMC-shaped handle of one plug of this device, for
// node: it fits today's Inventory while topology levels are to come.
func (a *FenceAgent) Plug(node, plug string) *FenceAgentPlug {
	return &FenceAgentPlug{agent: a, node: node, plug: plug}
}

// FenceAgentPlug is one plug of a FenceAgent device seen as a BMC.
type FenceAgentPlug struct {
	agent *FenceAgent
	node  string
	plug  string
}

var _ BMC = (*FenceAgentPlug)(nil)

// PowerState runs the agent's status for the plug, or shares a run with
// the reads of the device's other plugs asking at the same time
// (sharedstatus.go).
// An off reading counts only for a plug the device lists (plugcheck.go).
func (p *FenceAgentPlug) PowerState(ctx context.Context) (vocab.PowerState, error) {
	state, err := p.agent.sharedStatus(ctx, p.node, p.plug)
	if err == nil && state == vocab.PowerOff {
		if err := p.agent.checkPlugListed(ctx, p.node, p.plug); err != nil {
			return vocab.PowerUnknown, err
		}
	}
	return state, err
}

// PowerOff runs the agent's off for the plug.
func (p *FenceAgentPlug) PowerOff(ctx context.Context) error {
	return p.agent.action(ctx, p.node, vocab.OpPowerOff, actionOff, p.plug)
}

// PowerOn runs the agent's on for the plug.
func (p *FenceAgentPlug) PowerOn(ctx context.Context) error {
	return p.agent.action(ctx, p.node, vocab.OpPowerOn, actionOn, p.plug)
}

// PowerCycle runs the agent's reboot (off, wait for off, on) for the plug.
func (p *FenceAgentPlug) PowerCycle(ctx context.Context) error {
	return p.agent.action(ctx, p.node, vocab.OpPowerCycle, actionReboot, p.plug)
}

// SystemGUID is not supported: outlets have no system GUID.
func (p *FenceAgentPlug) SystemGUID(context.Context) (string, error) {
	return "", p.agent.failPlug(p.node, p.plug, vocab.OpSystemGUID, vocab.KindNotSupported,
		errors.New("a fence agent plug reports no system GUID"), nil)
}

// Close is a no-op: each request is one run of the agent.
func (p *FenceAgentPlug) Close() error { return nil }

// agentResult is one finished run of an agent.
type agentResult struct {
	exit           int
	stdout, stderr []byte
}

// failure describes a run that did not succeed, from its exit code and
// stderr (or stdout when stderr is empty).
func (r agentResult) failure(action string) error {
	out := agentMessage(r.stderr)
	if out == "" {
		out = agentMessage(r.stdout)
	}
	if out == "" {
		return fmt.Errorf("%s: exit code %d, no output", action, r.exit)
	}
	return fmt.Errorf("%s: exit code %d: %s", action, r.exit, out)
}

// agentMessage is an agent's output as one line for an error: its lines
// joined with "; ", without fencing.py's timestamps and its closing
// "Please use '-h' for usage", which say nothing about what went wrong.
func agentMessage(out []byte) string {
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(timestampPrefix.ReplaceAllString(l, ""))
		if l == "" || strings.Contains(l, "Please use '-h' for usage") {
			continue
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "; ")
}

// timestampPrefix is the "2026-11-23 09:05:29,536 " fencing.py logs with.
var timestampPrefix = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ `)

// run builds the request on stdin, reading the secrets, and runs the agent
// with retries after timeouts. It returns the secrets read, for redaction.
func (a *FenceAgent) run(ctx context.Context, node, op, action, plug string) (agentResult, []string, error) {
	var in strings.Builder
	fmt.Fprintf(&in, "action=%s\n", action)
	if plug != "" {
		if a.plugKey == "" {
			return agentResult{}, nil, a.failPlug(node, plug, op, vocab.KindNotSupported, errors.New("the agent takes no plug"), nil)
		}
		if strings.ContainsAny(plug, "\n\r\x00") {
			return agentResult{}, nil, a.failPlug(node, plug, op, vocab.KindNotSupported, errors.New("plug has a line break or NUL"), nil)
		}
		fmt.Fprintf(&in, "%s=%s\n", a.plugKey, plug)
	}
	for _, k := range slices.Sorted(maps.Keys(a.opts.Options)) {
		fmt.Fprintf(&in, "%s=%s\n", k, a.opts.Options[k])
	}
	var secrets []string
	for _, k := range slices.Sorted(maps.Keys(a.opts.Secrets)) {
		v, err := a.opts.Secrets[k]()
		if err != nil {
			return agentResult{}, secrets, a.failPlug(node, plug, op, vocab.KindAuth, fmt.Errorf("reading secret %s: %w", k, err), secrets)
		}
		if strings.ContainsAny(v, "\n\r\x00") {
			return agentResult{}, secrets, a.failPlug(node, plug, op, vocab.KindAuth, fmt.Errorf("secret %s has a line break or NUL", k), secrets)
		}
		secrets = append(secrets, v)
		fmt.Fprintf(&in, "%s=%s\n", k, v)
	}
	for attempt := 0; ; attempt++ {
		res, err := a.exec(ctx, node, plug, op, in.String(), secrets)
		if err == nil {
			return res, secrets, nil
		}
		if KindOf(err) != vocab.KindTimeout || attempt >= a.opts.Retries || ctx.Err() != nil {
			return agentResult{}, secrets, err
		}
	}
}

// exec runs the agent once with stdin. It returns an error only when the
// run did not finish by itself (timeout, context end, signal, could not
// start); the exit code is the caller's to judge.
func (a *FenceAgent) exec(ctx context.Context, node, plug, op, stdin string, secrets []string) (agentResult, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	// No arguments: an agent started without any reads its options from
	// stdin, so nothing secret is in /proc/PID/cmdline.
	cmd := exec.CommandContext(ctx, a.path)
	cmd.Env = agentEnv
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(stdin)
	stdout := &cappedBuffer{limit: maxAgentOutput}
	stderr := &cappedBuffer{limit: maxAgentOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Its own process group, killed whole: agents run snmpget, ipmitool,
	// ssh, … which must not outlive the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A child that left the group (setsid) and holds the pipes cannot
	// hold the run: they are closed this long after the agent ended.
	cmd.WaitDelay = time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return agentResult{}, a.failPlug(node, plug, op, vocab.KindBMC, fmt.Errorf("starting the agent: %w", err), secrets)
	}
	// Once the agent has ended, and before it is reaped (so that its PID,
	// the group's ID, cannot be reused yet), kill what it left in its
	// group: a finished run leaves nothing behind either.
	pid := cmd.Process.Pid
	waitExited(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	err := cmd.Wait()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // the agent itself exited 0; an escaped child held the pipes
	}
	res := agentResult{stdout: stdout.Bytes(), stderr: stderr.Bytes()}
	if ctx.Err() != nil {
		return res, a.failPlug(node, plug, op, vocab.KindTimeout,
			fmt.Errorf("agent killed with its process group after %s: %w", time.Since(start).Round(time.Millisecond), context.Cause(ctx)), secrets)
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &exitErr) && exitErr.Exited():
		res.exit = exitErr.ExitCode()
		return res, nil
	case errors.As(err, &exitErr):
		return res, a.failPlug(node, plug, op, vocab.KindBMC, fmt.Errorf("agent ended by %s: %w", exitErr.ProcessState, res.failure(op)), secrets)
	}
	return res, a.failPlug(node, plug, op, vocab.KindBMC, fmt.Errorf("running the agent: %w", err), secrets)
}

// waitExited blocks until process pid has ended, without reaping it
// (waitid with WNOWAIT): cmd.Wait reaps it afterwards.
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// classifyAgent maps the messages of fencing.py and the tools it runs onto
// ErrorKinds; the exit code says nothing (fencing.py exits 1 for every
// failure). Unrecognised failures are KindBMC.
func classifyAgent(stderr []byte) vocab.ErrorKind { return agentMessageKinds.of(string(stderr)) }

var agentMessageKinds = messageKinds{
	{"Authentication failure", vocab.KindAuth}, // net-snmp, wrong v3 password
	{"incorrect password", vocab.KindAuth},
	{"Invalid user name", vocab.KindAuth},
	// EC_LOGIN_DENIED: fencing.py says it for refused logins and for
	// devices that never answered alike.
	{"Unable to connect/login", vocab.KindAuth},
	{"Timeout: No Response", vocab.KindTimeout}, // net-snmp: also a wrong v1/v2c community
	{"Connection timed out", vocab.KindTimeout},
	{"Connection refused", vocab.KindUnreachable},
	{"No route to host", vocab.KindUnreachable},
	{"Network is unreachable", vocab.KindUnreachable},
	{"Name or service not known", vocab.KindUnreachable},
	{"Connection lost", vocab.KindUnreachable},
}

// fail builds the driver's *Error for the device; the cause is redacted of
// every secret, so kind must be decided before.
func (a *FenceAgent) fail(op string, kind vocab.ErrorKind, err error, secrets []string) error {
	return a.failPlug("", "", op, kind, err, secrets)
}

func (a *FenceAgent) failPlug(node, plug, op string, kind vocab.ErrorKind, err error, secrets []string) error {
	endpoint := a.endpoint
	if plug != "" {
		endpoint += "/" + plug
	}
	for _, s := range secrets {
		err = redactError(err, a.opts.Options["username"], s)
	}
	device := "fence device " + a.name
	if a.opts.Node != "" {
		device = "fence device " + a.opts.Node
	}
	if plug == "" {
		node = "" // the device as a whole (monitor, list): no node's plug
	}
	return &Error{Node: node, Device: device, Op: op, Endpoint: endpoint, Kind: kind, Err: truncateError(err, maxErrorText)}
}

// cappedBuffer keeps the first limit bytes written to it and discards the
// rest, so a chatty agent cannot grow fenced's memory.
type cappedBuffer struct {
	buf   bytes.Buffer
	limit int
	cut   bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	room := b.limit - b.buf.Len()
	if len(p) > room {
		b.cut = true
	}
	b.buf.Write(p[:max(0, min(len(p), room))])
	return len(p), nil
}

func (b *cappedBuffer) Bytes() []byte {
	if b.cut {
		return append(b.buf.Bytes(), "...(truncated)"...)
	}
	return b.buf.Bytes()
}

var _ io.Writer = (*cappedBuffer)(nil)
