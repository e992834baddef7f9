package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one component of the control plane, running in its own process
// group with its stdout and stderr going to one log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	logFile *os.File
	pgid    int

	done    chan struct{} // closed once the process has been reaped
	exitErr error         // valid after done is closed

	stopOnce sync.Once
}

// startProcess starts path with args as component name, logging to logPath.
//
// The child gets its own process group (Setpgid), so that Stop can kill
// whatever it may have forked, and so that a Ctrl-C on the terminal reaches
// the test binary, which then cleans up, rather than racing it. Pdeathsig
// SIGKILL makes the kernel kill the child if the test binary dies without
// cleaning up (SIGKILL, a test timeout's os.Exit, a crash).
func startProcess(name, logPath, path string, args, env []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: open log: %w", name, err)
	}
	// The command line heads the log, so a log read on its own says what ran.
	fmt.Fprintf(logFile, "### %s %s\n### started %s\n", path, strings.Join(args, " "), time.Now().Format(time.RFC3339Nano))

	cmd := exec.Command(path, args...)
	cmd.Env = env
	// An *os.File is handed to the child as its fd directly: no copying
	// goroutine in the test binary, and the log stays complete even if the
	// test binary is gone first.
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, path, err)
	}
	p := &process{
		name:    name,
		logPath: logPath,
		cmd:     cmd,
		logFile: logFile,
		pgid:    cmd.Process.Pid, // Setpgid with Pgid 0: the group is named after the child
		done:    make(chan struct{}),
	}
	track(p.pgid)
	go func() {
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.exitErr
	default:
		return false, nil
	}
}

// stop ends the process group: SIGTERM first so components can log why they
// stop, SIGKILL after grace. It always finishes with a SIGKILL to the group,
// which sweeps up anything the component forked that outlived it.
func (p *process) stop(grace time.Duration) {
	p.stopOnce.Do(func() {
		if done, _ := p.exited(); !done {
			_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(grace):
				fmt.Fprintf(p.logFile, "### no exit %s after SIGTERM: SIGKILL\n", grace)
			}
		}
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			// Only a process stuck in the kernel (D state) gets here; there
			// is nothing more a test can do about it.
		}
		untrack(p.pgid)
		fmt.Fprintf(p.logFile, "### stopped %s (%v)\n", time.Now().Format(time.RFC3339Nano), p.exitErr)
		p.logFile.Close()
	})
}

// tail returns the last n lines of the log file.
func (p *process) tail(n int) string { return TailFile(p.logPath, n) }

// TailFile returns the last n lines of the file at path, or a note saying why
// it cannot. It reads at most the last 256 KiB: enough for n lines of any
// sane log, and bounded for a component that logged a flood.
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	const maxRead = 256 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > maxRead {
		_, _ = f.Seek(fi.Size()-maxRead, io.SeekStart)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// The spawner starts every child from one goroutine locked to its own OS
// thread for the life of the test binary. Pdeathsig fires when the *thread*
// that forked the child exits, not the process; the Go runtime ends a thread
// when a goroutine exits while locked to it (code that switches network
// namespaces does this on purpose), so forking from an arbitrary thread could
// kill a healthy component in the middle of a test.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread must outlive every child
			for r := range spawner.reqs {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}

// live holds the process groups started and not yet stopped, for the signal
// handler: Pdeathsig reaches only the direct child, a signal handler can kill
// whole groups.
var live struct {
	sync.Mutex
	groups  map[int]bool
	hooks   map[int]func() // run after KillAll on a signal
	nextID  int
	handler sync.Once
}

// HandleSignals controls whether the package installs its SIGINT/SIGTERM/
// SIGHUP handler (kill every process group, run the OnInterrupt hooks, die
// of the signal). It is on for test binaries; a program that handles
// signals itself and stops clusters in order (fenced-cluster) turns it off
// before the first Start.
var HandleSignals = true

// OnInterrupt registers f to run when a signal kills the test binary, after
// every process group is dead; the returned func unregisters it. Other
// harness layers use it to remove what processes cannot clean up
// themselves, such as network namespaces.
func OnInterrupt(f func()) (unregister func()) {
	live.Lock()
	defer live.Unlock()
	if live.hooks == nil {
		live.hooks = map[int]func(){}
	}
	id := live.nextID
	live.nextID++
	live.hooks[id] = f
	installOnce()
	return func() {
		live.Lock()
		defer live.Unlock()
		delete(live.hooks, id)
	}
}

func track(pgid int) {
	live.Lock()
	defer live.Unlock()
	if live.groups == nil {
		live.groups = map[int]bool{}
	}
	live.groups[pgid] = true
	installOnce()
}

func untrack(pgid int) {
	live.Lock()
	defer live.Unlock()
	delete(live.groups, pgid)
}

func installOnce() {
	if HandleSignals {
		live.handler.Do(installSignalHandler)
	}
}

// installSignalHandler makes SIGINT, SIGTERM and SIGHUP kill every live
// process group and run the OnInterrupt hooks, then re-raises the signal with
// its default action, so the test binary still dies of it as it would have
// without the harness.
func installSignalHandler() {
	ch := make(chan os.Signal, 1)
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}
	signal.Notify(ch, sigs...)
	go func() {
		sig := <-ch
		KillAll()
		live.Lock()
		hooks := make([]func(), 0, len(live.hooks))
		for _, f := range live.hooks {
			hooks = append(hooks, f)
		}
		live.Unlock()
		for _, f := range hooks {
			f()
		}
		signal.Reset(sigs...)
		code := 1
		if s, ok := sig.(syscall.Signal); ok {
			_ = syscall.Kill(os.Getpid(), s)
			code = 128 + int(s)
		}
		// The re-raised signal is delivered asynchronously; give it time.
		// Getting past the sleep means the signal was ignored when the
		// binary started (as SIGINT is for background jobs of a
		// non-interactive shell): exit as a shell would report it.
		time.Sleep(2 * time.Second)
		os.Exit(code)
	}()
}

// KillAll sends SIGKILL to the process group of every component still running
// in this test binary, from any cluster. Stop is the normal way; this is for
// emergencies such as signal handlers.
func KillAll() {
	live.Lock()
	defer live.Unlock()
	for pgid := range live.groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// groupAlive reports whether any process of group pgid still exists.
func groupAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
