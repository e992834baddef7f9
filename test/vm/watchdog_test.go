// Package vm runs fenced's watchdog code on a real Linux kernel: Debian's,
// under QEMU (software emulation), with QEMU's emulated Intel 6300ESB
// watchdog and the kernel's own driver for it. make e2e-watchdog-vm runs
// it; make test skips it (it needs QEMU and a kernel, hack/vm-kernel.sh).
package vm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// vmTimeout is the watchdog timeout the guest sets, in seconds.
const vmTimeout = 5

// TestWatchdogOnARealKernel boots a VM whose init (wdguest) arms the
// i6300ESB watchdog through pkg/watchdog, pets it, and then stops petting
// (an agent told of a fence order), closes it without the magic close (an
// agent killed) or disarms it (a clean shutdown). The first two must reset
// the machine a timeout after the last pet, not before; the third must
// not reset it.
func TestWatchdogOnARealKernel(t *testing.T) {
	dir := os.Getenv("FENCED_VM_DIR")
	if dir == "" {
		t.Skip("needs QEMU and a kernel: make e2e-watchdog-vm")
	}
	initrd := buildInitramfs(t, dir)
	for _, tc := range []struct {
		mode  string
		last  string // the guest's line after its last pet
		reset bool
	}{
		{"stop", "wdguest: stopped petting", true},
		{"close", "wdguest: closed without the magic close", true},
		{"disarm", "wdguest: disarmed", false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			run := boot(t, dir, initrd, "wdguest.mode="+tc.mode)
			if run.has("wdguest: FAIL") {
				t.Fatalf("the guest failed:\n%s", run.output())
			}
			if !run.has(`wdguest: armed identity="i6300ESB timer"`) || !run.has("software=false") {
				t.Fatalf("the guest did not arm the i6300ESB as hardware:\n%s", run.output())
			}
			lastPet, ok := run.when(tc.last)
			if !ok {
				t.Fatalf("no %q from the guest:\n%s", tc.last, run.output())
			}
			poweredOff := run.has("reboot: Power down")
			if !tc.reset {
				if !poweredOff || !run.has("wdguest: alive after twice the timeout") {
					t.Fatalf("the disarmed watchdog did not leave the machine up for twice its timeout:\n%s", run.output())
				}
				return
			}
			if poweredOff {
				t.Fatalf("powered off, not reset by the watchdog:\n%s", run.output())
			}
			after := run.exited.Sub(lastPet)
			t.Logf("reset %s after the last pet (timeout %d s)", after.Round(10*time.Millisecond), vmTimeout)
			if after < (vmTimeout-1)*time.Second {
				t.Errorf("reset %s after the last pet: before the watchdog's timeout of %d s", after, vmTimeout)
			}
			if run.has("wdguest: up 10s after the last pet") {
				t.Errorf("still up 10 s after the last pet, twice the watchdog's timeout:\n%s", run.output())
			}
		})
	}
}

// buildInitramfs builds the guest's init and packs it, with the two
// modules from dir, into a gzipped newc cpio archive.
func buildInitramfs(t *testing.T, dir string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	for _, d := range []string{"dev", "proc", "modules"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", filepath.Join(root, "init"), "fenced.io/fenced/test/vm/wdguest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the guest's init: %v\n%s", err, out)
	}
	for _, m := range []string{"watchdog.ko", "i6300esb.ko"} {
		b, err := os.ReadFile(filepath.Join(dir, m))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "modules", m), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	initrd := filepath.Join(t.TempDir(), "initrd.gz")
	pack := exec.Command("sh", "-c", "find . | cpio -o -H newc --quiet | gzip -1 > "+initrd)
	pack.Dir = root
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("packing the initramfs: %v\n%s", err, out)
	}
	return initrd
}

// vmRun is one boot's serial console, each line with the time it arrived,
// and when QEMU exited.
type vmRun struct {
	lines  []string
	at     []time.Time
	exited time.Time
}

func (r *vmRun) has(s string) bool {
	_, ok := r.when(s)
	return ok
}

// when is the arrival of the first line that contains s.
func (r *vmRun) when(s string) (time.Time, bool) {
	for i, l := range r.lines {
		if strings.Contains(l, s) {
			return r.at[i], true
		}
	}
	return time.Time{}, false
}

func (r *vmRun) output() string {
	return strings.Join(r.lines, "\n")
}

// boot runs the VM until it resets or powers off (QEMU exits on either:
// -no-reboot), five minutes at most.
func boot(t *testing.T, dir, initrd, args string) *vmRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	qemu := exec.CommandContext(ctx, "qemu-system-x86_64",
		"-machine", "pc", "-m", "256", "-nographic", "-no-reboot",
		"-kernel", filepath.Join(dir, "vmlinuz"), "-initrd", initrd,
		"-append", fmt.Sprintf("console=ttyS0 panic=-1 quiet wdguest.timeout=%d %s", vmTimeout, args),
		"-device", "i6300esb", "-action", "watchdog=reset")
	stdout, err := qemu.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	qemu.Stderr = qemu.Stdout
	if err := qemu.Start(); err != nil {
		t.Fatalf("starting QEMU: %v", err)
	}
	run := &vmRun{}
	scan := bufio.NewScanner(stdout)
	for scan.Scan() {
		line := strings.TrimSpace(scan.Text())
		run.lines, run.at = append(run.lines, line), append(run.at, time.Now())
	}
	err = qemu.Wait()
	run.exited = time.Now()
	if ctx.Err() != nil {
		t.Fatalf("the VM still ran after five minutes:\n%s", run.output())
	}
	if err != nil {
		t.Fatalf("QEMU: %v\n%s", err, run.output())
	}
	return run
}
