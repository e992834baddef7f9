// Package wdemu is a watchdog outside a test machine, reached over a unix
// socket in the protocol of watchdog.SocketPrefix: the harness's machines
// are processes on one kernel with no watchdog of their own, so the
// harness gives each one of these, and kills the machine when it fires —
// whatever its agent does, hung, killed or cut off, as a hardware watchdog
// resets a machine whatever its software does.
package wdemu

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Identity is how the emulated watchdog names itself to the agent.
const Identity = "fenced-harness-watchdog"

// Watchdog is one machine's emulated watchdog.
type Watchdog struct {
	ln   net.Listener
	fire func()

	mu      sync.Mutex
	timeout time.Duration
	timer   *time.Timer // nil while disarmed
	lastPet time.Time
	conns   map[net.Conn]bool
	closed  bool
	wg      sync.WaitGroup
}

// Start listens at path (a unix socket) and calls fire, in a goroutine of
// its own, each time the watchdog fires: timeout after the last pet, while
// armed.
func Start(path string, fire func()) (*Watchdog, error) {
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("wdemu: %w", err)
	}
	w := &Watchdog{ln: ln, fire: fire, conns: map[net.Conn]bool{}}
	w.wg.Add(1)
	go w.accept()
	return w, nil
}

// Armed reports whether the watchdog counts down now, and since when (the
// last pet).
func (w *Watchdog) Armed() (bool, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.timer != nil, w.lastPet
}

// Close stops listening, drops every connection and disarms.
func (w *Watchdog) Close() error {
	w.mu.Lock()
	w.closed = true
	w.stop()
	for c := range w.conns {
		c.Close()
	}
	w.mu.Unlock()
	err := w.ln.Close()
	w.wg.Wait()
	return err
}

func (w *Watchdog) accept() {
	defer w.wg.Done()
	for {
		c, err := w.ln.Accept()
		if err != nil {
			return
		}
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			c.Close()
			return
		}
		w.conns[c] = true
		w.mu.Unlock()
		w.wg.Add(1)
		go w.serve(c)
	}
}

// serve answers one connection's lines; its end, without V, leaves the
// watchdog armed.
func (w *Watchdog) serve(c net.Conn) {
	defer w.wg.Done()
	defer func() {
		w.mu.Lock()
		delete(w.conns, c)
		w.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "arm":
			secs, err := strconv.Atoi(f[1])
			if err != nil || secs < 1 {
				fmt.Fprintf(c, "error bad timeout %q\n", f[1])
				return
			}
			w.arm(time.Duration(secs) * time.Second)
			fmt.Fprintf(c, "armed %d hardware %s\n", secs, Identity)
		case len(f) == 1 && f[0] == "pet":
			w.pet()
		case len(f) == 1 && f[0] == "V":
			w.mu.Lock()
			w.stop()
			w.mu.Unlock()
			return
		default:
			fmt.Fprintf(c, "error unknown request %q\n", strings.TrimSpace(line))
			return
		}
	}
}

// arm sets the timeout and pets, as opening /dev/watchdog does.
func (w *Watchdog) arm(timeout time.Duration) {
	w.mu.Lock()
	w.timeout = timeout
	w.mu.Unlock()
	w.pet()
}

// pet restarts the countdown of an armed watchdog (arming it if need be).
func (w *Watchdog) pet() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timeout == 0 || w.closed {
		return
	}
	w.stop()
	w.lastPet = time.Now()
	var t *time.Timer
	t = time.AfterFunc(w.timeout, func() {
		w.mu.Lock()
		if w.timer != t {
			w.mu.Unlock()
			return // petted or disarmed meanwhile
		}
		w.timer = nil
		w.mu.Unlock()
		w.fire()
	})
	w.timer = t
}

// stop disarms; w.mu held.
func (w *Watchdog) stop() {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
}
