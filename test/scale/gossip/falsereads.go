package gossip

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"fenced.io/fenced/pkg/heartbeat"
	"fenced.io/fenced/pkg/identity"
	"fenced.io/fenced/pkg/vocab"
)

// False reads: how often a fencer would read the power of a node that is
// fine — its beats looked stopped, or gossip declared it dead — when the
// nodes are starved of CPU and lose packets. The agents run in a child
// process that the parent stops (SIGSTOP) and continues at random, as a
// cgroup's CPU quota throttles a node's agent: every goroutine of the
// child waits out each stall, which is what the child's scheduling
// latency shows. The fencer runs in the parent, not starved, and every
// packet of both (beats, probes, gossip) meets the loss on its way out.

// FalseReadOptions shape one measurement.
type FalseReadOptions struct {
	// Members are the agents of the child process.
	Members int
	// Window is how long the measurement runs once the ring has settled.
	Window time.Duration
	// Loss is the fraction of UDP packets every member drops.
	Loss float64
	// Stall is how long each stop of the child lasts; StallEvery the mean
	// time between the starts of two stops (drawn exponentially). 0: no
	// stalls.
	Stall, StallEvery time.Duration
	Progress          func(format string, args ...any)
}

// FalseReadResult is what one measurement found.
type FalseReadResult struct {
	Options FalseReadOptions
	// Window is how long it measured, Stalls how many stops it made.
	Window time.Duration
	Stalls int
	// Silences and Deaths are the fencer's reports of live members: beats
	// stopped, gossip dead — each a power read of a node that is fine.
	Silences, Deaths int
	// SchedP50 and SchedP99 are the child's scheduling latency over the
	// window: how late a wake-up due at any instant ran (lateness), taken
	// every 10 ms of the window. The Go runtime's own /sched/latencies
	// does not see a stopped process: its timers fire late, and the
	// goroutines they wake then run at once.
	SchedP50, SchedP99 time.Duration
	// Beats is how many beats the fencer received a second.
	BeatsPerSecond float64
}

// NodeDays is the exposure the result covers.
func (r FalseReadResult) NodeDays() float64 {
	return float64(r.Options.Members) * r.Window.Hours() / 24
}

// PerNodeDay is the rate of false reads, and the upper end of its 95 %
// confidence interval (Poisson; with none seen, 3.0 per exposure).
func (r FalseReadResult) PerNodeDay() (rate, upper95 float64) {
	k := float64(r.Silences + r.Deaths)
	days := r.NodeDays()
	if days == 0 {
		return math.NaN(), math.NaN()
	}
	// Wilson–Hilferty's approximation of the chi-square quantile for
	// 2(k+1) degrees of freedom, halved.
	df := 2 * (k + 1)
	q := df * math.Pow(1-2/(9*df)+1.6449*math.Sqrt(2/(9*df)), 3) / 2
	return k / days, q / days
}

// childEnv carries a child's settings; its presence makes the test binary
// a child (RunFalseReadsChild).
const childEnv = "FENCED_FALSE_READS_CHILD"

// childSettings is what the parent tells the child.
type childSettings struct {
	Join    string
	Members int
	Loss    float64
}

// childReport is the child's last line on stdout.
type childReport struct {
	SchedP50, SchedP99 time.Duration
	Error              string
}

// RunFalseReads runs one measurement: a fencer here, opts.Members agents
// in a child process (this test binary run again, which calls
// RunFalseReadsChild from TestMain).
func RunFalseReads(ctx context.Context, opts FalseReadOptions) (FalseReadResult, error) {
	res := FalseReadResult{Options: opts}
	say := opts.Progress
	if say == nil {
		say = func(string, ...any) {}
	}
	traffic := &Traffic{}
	traffic.SetLoss(opts.Loss)
	tr, port, err := newTransport(traffic)
	if err != nil {
		return res, err
	}
	k, err := identity.NewKey()
	if err != nil {
		return res, err
	}
	fencer, err := heartbeat.New(heartbeat.Config{NodeName: "fencer", BindAddr: "127.0.0.1", BindPort: port, ClusterName: "bench", SecretKey: key},
		heartbeat.Options{Meta: heartbeat.Meta{BootID: "boot-fencer", Role: heartbeat.RoleFencer, Agent: "bench-false-reads"},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Key: k, Transport: tr})
	if err != nil {
		tr.Shutdown()
		return res, err
	}
	defer func() { _ = fencer.Shutdown() }()

	var mu sync.Mutex
	counting := false
	silent := map[string]bool{}
	fencer.OnChange(func(m heartbeat.Member) {
		mu.Lock()
		defer mu.Unlock()
		if m.Silent && !silent[m.Name] && counting {
			res.Silences++
		}
		silent[m.Name] = m.Silent
		if m.State == vocab.MemberDead && counting {
			res.Deaths++
		}
	})
	if err := fencer.Join(ctx, ""); err != nil {
		return res, err
	}

	settings, _ := json.Marshal(childSettings{Join: fencer.LocalAddr(), Members: opts.Members, Loss: opts.Loss})
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	child := exec.CommandContext(ctx, self, "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+string(settings))
	stdin, err := child.StdinPipe()
	if err != nil {
		return res, err
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		return res, err
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		return res, err
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()

	settle := time.Now().Add(5 * time.Minute)
	for fencer.Alive() < opts.Members+1 {
		if time.Now().After(settle) {
			return res, fmt.Errorf("the fencer sees %d of %d members alive after 5 minutes", fencer.Alive(), opts.Members+1)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Every member beating long enough to have a history of its own.
	time.Sleep(5 * time.Second)
	say("%d agents alive in the fencer's view; measuring for %s (loss %g%%, stalls of %s every %s on average)",
		opts.Members, opts.Window, 100*opts.Loss, opts.Stall, opts.StallEvery)

	mu.Lock()
	counting = true
	mu.Unlock()
	if _, err := io.WriteString(stdin, "start\n"); err != nil {
		return res, err
	}
	start := time.Now()
	received0 := fencer.BeatsReceived()
	stop := make(chan struct{})
	stalled := make(chan int)
	go func() { stalled <- stallLoop(child.Process.Pid, opts.Stall, opts.StallEvery, stop) }()
	progress := time.NewTicker(time.Minute)
	deadline := time.NewTimer(opts.Window)
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case <-deadline.C:
			break wait
		case <-progress.C:
			mu.Lock()
			say("%s of %s: %d silences, %d deaths", time.Since(start).Round(time.Second), opts.Window, res.Silences, res.Deaths)
			mu.Unlock()
		}
	}
	progress.Stop()
	close(stop)
	res.Stalls = <-stalled
	res.Window = time.Since(start)
	res.BeatsPerSecond = float64(fencer.BeatsReceived()-received0) / res.Window.Seconds()
	mu.Lock()
	counting = false
	mu.Unlock()

	_ = stdin.Close()
	var rep childReport
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		_ = json.Unmarshal(sc.Bytes(), &rep)
	}
	if rep.Error != "" {
		return res, errors.New("child: " + rep.Error)
	}
	res.SchedP50, res.SchedP99 = rep.SchedP50, rep.SchedP99
	return res, ctx.Err()
}

// stallLoop stops and continues process pid — every mean interval
// (exponentially distributed), for d — until stop is closed, and returns
// how many stops it made. d == 0: none.
func stallLoop(pid int, d, every time.Duration, stop chan struct{}) int {
	if d <= 0 || every <= 0 {
		<-stop
		return 0
	}
	n := 0
	for {
		select {
		case <-stop:
			return n
		case <-time.After(time.Duration(rand.ExpFloat64() * float64(every))):
		}
		if syscall.Kill(pid, syscall.SIGSTOP) != nil {
			return n
		}
		n++
		time.Sleep(d)
		if syscall.Kill(pid, syscall.SIGCONT) != nil {
			return n
		}
	}
}

// RunFalseReadsChild is the child's side: its agents join the fencer and
// beat until stdin closes; then it reports on stdout its scheduling
// latency over the window, which starts with the parent's first line. It
// returns the exit code.
func RunFalseReadsChild() int {
	var s childSettings
	report := func(r childReport) int {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		if r.Error != "" {
			return 1
		}
		return 0
	}
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &s); err != nil {
		return report(childReport{Error: err.Error()})
	}
	traffic := &Traffic{}
	traffic.SetLoss(s.Loss)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	var rings []*heartbeat.Ring
	defer func() {
		for _, r := range rings {
			_ = r.Shutdown()
		}
	}()
	for i := range s.Members {
		tr, port, err := newTransport(traffic)
		if err != nil {
			return report(childReport{Error: err.Error()})
		}
		k, err := identity.NewKey()
		if err != nil {
			return report(childReport{Error: err.Error()})
		}
		name := "agent-" + strconv.Itoa(i)
		r, err := heartbeat.New(heartbeat.Config{NodeName: name, BindAddr: "127.0.0.1", BindPort: port, ClusterName: "bench", SecretKey: key},
			heartbeat.Options{Meta: heartbeat.Meta{BootID: "boot-" + name, Role: heartbeat.RoleObserver, Agent: "bench-false-reads"},
				Logger: quiet, Key: k, Transport: tr, Seeds: func() []string { return []string{s.Join} }})
		if err != nil {
			tr.Shutdown()
			return report(childReport{Error: err.Error()})
		}
		rings = append(rings, r)
		if err := r.Join(ctx, ""); err != nil {
			return report(childReport{Error: fmt.Sprintf("%s joining: %v", name, err)})
		}
	}
	// The window starts with the parent's first line, ends with stdin.
	in := bufio.NewReader(os.Stdin)
	_, _ = in.ReadString('\n')
	done := make(chan struct{})
	late := make(chan []time.Duration)
	go func() { late <- lateness(10*time.Millisecond, done) }()
	_, _ = io.Copy(io.Discard, in)
	close(done)
	l := <-late
	return report(childReport{SchedP50: percentile(l, 0.5), SchedP99: percentile(l, 0.99)})
}

// lateness wakes every step until done is closed and returns, for every
// instant a step apart, how late a wake-up due then ran: a stall of the
// process makes every instant in it late by what was left of it.
func lateness(step time.Duration, done chan struct{}) []time.Duration {
	var l []time.Duration
	due := time.Now().Add(step)
	for {
		select {
		case <-done:
			return l
		case <-time.After(time.Until(due)):
		}
		now := time.Now()
		for ; !due.After(now); due = due.Add(step) {
			l = append(l, now.Sub(due))
		}
	}
}

// Row is one line of FalseReadsTable.
func (r FalseReadResult) Row() string {
	o := r.Options
	stalls := "none"
	if o.Stall > 0 {
		stalls = fmt.Sprintf("%s every %s on average (%d)", o.Stall, o.StallEvery, r.Stalls)
	}
	rate, upper := r.PerNodeDay()
	return fmt.Sprintf("| %d | %s | %g %% | %s | %s / %s | %.0f | %.2f | %d | %d | %.2f (≤ %.2f) |",
		o.Members, r.Window.Round(time.Second), 100*o.Loss, stalls, r.SchedP50.Round(100*time.Microsecond), r.SchedP99.Round(time.Millisecond), r.BeatsPerSecond, r.NodeDays(),
		r.Silences, r.Deaths, rate, upper)
}

// FalseReadsTable is the results as a Markdown table.
func FalseReadsTable(rows []FalseReadResult) string {
	var b strings.Builder
	b.WriteString("| agents | window | loss | stalls of the agents' process | their scheduling latency p50 / p99 | beats/s at the fencer | node-days | beats stopped (false) | gossip dead (false) | false reads per node-day (95 % upper bound) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		b.WriteString(r.Row() + "\n")
	}
	return b.String()
}
