//go:build !linux

package watchdog

import (
	"errors"
	"time"
)

// Device is a watchdog device; only Linux has them (device_linux.go).
type Device struct {
	Identity   string
	Timeout    time.Duration
	Software   bool
	MagicClose bool
}

// ErrNotLinux is Open's error outside Linux.
var ErrNotLinux = errors.New("watchdog devices are Linux's: this build cannot arm one")

// Open fails: only Linux has the watchdog API.
func Open(path string, timeout time.Duration) (*Device, error) { return nil, ErrNotLinux }

// Pet, Disarm and Close fail or do nothing: no device is ever open.
func (d *Device) Pet() error    { return ErrNotLinux }
func (d *Device) Disarm() error { return ErrNotLinux }
func (d *Device) Close() error  { return nil }
