package watchdog

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// softwareIdentities are the identities (WDIOC_GETSUPPORT) of watchdogs
// that are kernel timers, not hardware: a hung kernel never runs them, so
// they guarantee less (docs/design.md §10).
var softwareIdentities = []string{"Software Watchdog"}

// Device is an open Linux watchdog device (the kernel's watchdog API:
// /dev/watchdog, /dev/watchdogN). While it is open and armed the machine
// resets Timeout after the last Pet; closing it without Disarm leaves it
// armed, so that an agent that dies cannot keep its machine up.
type Device struct {
	f *os.File
	// Identity is the driver's name for the device, e.g. "i6300ESB timer".
	Identity string
	// Timeout is the timeout the driver set, which may be longer than the
	// one asked for (whole seconds, or the device's steps).
	Timeout time.Duration
	// Software says the device is a kernel timer (softdog), no hardware.
	Software bool
	// MagicClose says the driver disarms on the magic close (Disarm).
	MagicClose bool
}

// Open opens the watchdog device at path and sets its timeout to at
// least timeout. Opening arms the watchdog, and may pet one already armed
// (Linux's watchdog core starts or pings it on open): call Open only when
// the agent may pet (Confirmer.MayPet).
func Open(path string, timeout time.Duration) (*Device, error) {
	if timeout < time.Second {
		return nil, fmt.Errorf("watchdog %s: timeout %s: the Linux watchdog API counts in whole seconds, at least 1 s", path, timeout)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("watchdog %s is open in another process (a watchdog daemon, or another agent): %w", path, err)
		}
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	d := &Device{f: f}
	fd := int(f.Fd())
	info, err := unix.IoctlGetWatchdogInfo(fd)
	if err != nil {
		f.Close() // armed and not disarmed: it resets the machine unless opened again in time
		return nil, fmt.Errorf("watchdog %s: WDIOC_GETSUPPORT: %w (is it a watchdog device?)", path, err)
	}
	d.Identity = strings.TrimRight(string(info.Identity[:]), "\x00")
	d.MagicClose = info.Options&unix.WDIOF_MAGICCLOSE != 0
	for _, s := range softwareIdentities {
		d.Software = d.Software || d.Identity == s
	}
	if info.Options&unix.WDIOF_SETTIMEOUT == 0 {
		f.Close()
		return nil, fmt.Errorf("watchdog %s (%s) cannot set its timeout", path, d.Identity)
	}
	secs := int(math.Ceil(timeout.Seconds()))
	if err := unix.IoctlSetPointerInt(fd, unix.WDIOC_SETTIMEOUT, secs); err != nil {
		f.Close()
		return nil, fmt.Errorf("watchdog %s (%s): setting the timeout to %d s: %w", path, d.Identity, secs, err)
	}
	got, err := unix.IoctlGetInt(fd, unix.WDIOC_GETTIMEOUT)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("watchdog %s (%s): reading the timeout back: %w", path, d.Identity, err)
	}
	d.Timeout = time.Duration(got) * time.Second
	if d.Timeout < timeout {
		f.Close()
		return nil, fmt.Errorf("watchdog %s (%s) set a timeout of %s, shorter than the %s asked for", path, d.Identity, d.Timeout, timeout)
	}
	return d, nil
}

// Pet restarts the watchdog's countdown.
func (d *Device) Pet() error {
	if err := unix.IoctlWatchdogKeepalive(int(d.f.Fd())); err != nil {
		return fmt.Errorf("watchdog (%s): keepalive: %w", d.Identity, err)
	}
	return nil
}

// Disarm stops the watchdog with the magic close ('V', then close): only
// for a clean shutdown the agent announced. A driver without the magic
// close cannot be disarmed; it is closed, and stays armed.
func (d *Device) Disarm() error {
	if !d.MagicClose {
		d.f.Close()
		return fmt.Errorf("watchdog (%s) has no magic close: it stays armed", d.Identity)
	}
	if _, err := d.f.Write([]byte("V")); err != nil {
		d.f.Close()
		return fmt.Errorf("watchdog (%s): magic close: %w", d.Identity, err)
	}
	return d.f.Close()
}

// Close closes the device and leaves the watchdog armed: the machine
// resets Timeout after the last pet unless the device is opened and
// petted again.
func (d *Device) Close() error { return d.f.Close() }
