package watchdog

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// SocketPrefix marks a watchdog device path that is no Linux device but a
// watchdog outside the machine, reached over a unix socket: "unix:" and
// the socket's absolute path. The test harness's machines are processes on
// one kernel with no watchdog of their own; the harness runs one such
// watchdog per machine, and kills the machine when it fires.
//
// The protocol, one line each way, like the Linux API's calls:
//
//	arm <seconds>  →  armed <seconds> <hardware|software> <identity>
//	pet            (no answer)
//	V              disarm (the magic close), then the connection closes
//
// A connection closed without V leaves the watchdog armed, counting from
// the last pet; opening it again and arming pets it, as opening
// /dev/watchdog does.
const SocketPrefix = vocab.WatchdogSocketPrefix

// IsSocket reports whether path names a socket watchdog.
func IsSocket(path string) bool { return strings.HasPrefix(path, SocketPrefix) }

// SocketDevice is an armed socket watchdog.
type SocketDevice struct {
	conn net.Conn
	// Identity, Timeout and Software as the watchdog said them.
	Identity string
	Timeout  time.Duration
	Software bool
}

// socketIOTimeout bounds one exchange with the watchdog.
const socketIOTimeout = 5 * time.Second

// OpenSocket connects to the socket watchdog path ("unix:/…") and arms it
// with at least timeout.
func OpenSocket(path string, timeout time.Duration) (*SocketDevice, error) {
	if !IsSocket(path) {
		return nil, fmt.Errorf("watchdog %s: not a %s path", path, SocketPrefix)
	}
	if timeout < time.Second {
		return nil, fmt.Errorf("watchdog %s: timeout %s: the watchdog counts in whole seconds, at least 1 s", path, timeout)
	}
	secs := int(math.Ceil(timeout.Seconds())) // at least the timeout asked for, as Open
	conn, err := net.DialTimeout("unix", strings.TrimPrefix(path, SocketPrefix), socketIOTimeout)
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	d := &SocketDevice{conn: conn}
	_ = conn.SetDeadline(time.Now().Add(socketIOTimeout))
	if _, err := fmt.Fprintf(conn, "arm %d\n", secs); err != nil {
		conn.Close()
		return nil, fmt.Errorf("watchdog %s: arming: %w", path, err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("watchdog %s: arming: %w", path, err)
	}
	_ = conn.SetDeadline(time.Time{})
	f := strings.SplitN(strings.TrimSpace(line), " ", 4)
	if len(f) != 4 || f[0] != "armed" || (f[2] != "hardware" && f[2] != "software") {
		conn.Close()
		return nil, fmt.Errorf("watchdog %s: arming: unexpected answer %q", path, strings.TrimSpace(line))
	}
	got, err := strconv.Atoi(f[1])
	if err != nil || got < secs {
		conn.Close()
		return nil, fmt.Errorf("watchdog %s (%s): armed with %s seconds, not the %d asked for", path, f[3], f[1], secs)
	}
	d.Timeout, d.Software, d.Identity = time.Duration(got)*time.Second, f[2] == "software", f[3]
	return d, nil
}

// Pet restarts the watchdog's countdown.
func (d *SocketDevice) Pet() error { return d.send("pet") }

// Disarm stops the watchdog (the magic close) and closes the connection.
func (d *SocketDevice) Disarm() error {
	err := d.send("V")
	return errors.Join(err, d.conn.Close())
}

// Close closes the connection and leaves the watchdog armed.
func (d *SocketDevice) Close() error { return d.conn.Close() }

func (d *SocketDevice) send(line string) error {
	_ = d.conn.SetWriteDeadline(time.Now().Add(socketIOTimeout))
	if _, err := fmt.Fprintln(d.conn, line); err != nil {
		return fmt.Errorf("watchdog (%s): %s: %w", d.Identity, line, err)
	}
	return nil
}
