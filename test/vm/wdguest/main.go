// Command wdguest is the init of test/vm's virtual machine: on a real Linux
// kernel it loads the watchdog core and QEMU's i6300ESB driver, arms the
// watchdog with fenced's own code (pkg/watchdog), pets it a few times and
// then does what the kernel command line says:
//
//	wdguest.mode=stop     stop petting and keep the device open (an agent
//	                      told of a fence order): the machine must reset
//	wdguest.mode=close    close the device without the magic close (an
//	                      agent killed): the machine must reset
//	wdguest.mode=disarm   the magic close (a clean shutdown): the machine
//	                      must live on; after twice the timeout it powers off
//
// wdguest.timeout=N sets the watchdog's timeout, in seconds. Every line it
// prints starts with "wdguest:", on the serial console the test reads.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"fenced.io/fenced/pkg/watchdog"
)

func say(format string, args ...any) {
	fmt.Fprintf(os.Stdout, "wdguest: "+format+"\n", args...)
}

func fail(format string, args ...any) {
	say("FAIL "+format, args...)
	// Powered off, not reset: the test tells a failure from the watchdog.
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func main() {
	if err := unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, ""); err != nil {
		fail("mounting /dev: %v", err)
	}
	if console, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		os.Stdout, os.Stderr = console, console
	}
	if err := unix.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		fail("mounting /proc: %v", err)
	}
	args := map[string]string{}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		fail("%v", err)
	}
	for _, f := range strings.Fields(string(cmdline)) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "wdguest.") {
			args[strings.TrimPrefix(k, "wdguest.")] = v
		}
	}
	secs, err := strconv.Atoi(args["timeout"])
	if err != nil {
		fail("wdguest.timeout: %v", err)
	}
	timeout := time.Duration(secs) * time.Second

	for _, m := range []string{"/modules/watchdog.ko", "/modules/i6300esb.ko"} {
		f, err := os.Open(m)
		if err != nil {
			fail("%v", err)
		}
		if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil {
			fail("loading %s: %v", m, err)
		}
		f.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat("/dev/watchdog"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fail("no /dev/watchdog 30 s after loading the driver")
		}
		time.Sleep(100 * time.Millisecond)
	}

	d, err := watchdog.Open("/dev/watchdog", timeout)
	if err != nil {
		fail("%v", err)
	}
	say("armed identity=%q timeout=%s software=%v magicclose=%v", d.Identity, d.Timeout, d.Software, d.MagicClose)
	for i := range 5 {
		time.Sleep(time.Second)
		if err := d.Pet(); err != nil {
			fail("%v", err)
		}
		say("pet %d", i+1)
	}
	switch mode := args["mode"]; mode {
	case "stop":
		say("stopped petting")
	case "close":
		if err := d.Close(); err != nil {
			fail("%v", err)
		}
		say("closed without the magic close")
	case "disarm":
		if err := d.Disarm(); err != nil {
			fail("%v", err)
		}
		say("disarmed")
	default:
		fail("wdguest.mode %q: want stop, close or disarm", mode)
	}
	start := time.Now()
	for {
		time.Sleep(time.Second)
		up := time.Since(start).Round(time.Second)
		say("up %s after the last pet", up)
		if up >= 2*d.Timeout {
			say("alive after twice the timeout; powering off")
			unix.Sync()
			_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
			select {}
		}
	}
}
