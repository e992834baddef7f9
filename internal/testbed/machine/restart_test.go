package machine

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestRestartExtra boots a machine (real logind and CSI plugin, a shell
// script for the kubelet) with one extra process and checks how the
// launcher treats it: killed without a request, it stays down; with a
// request and SIGUSR1, it starts again; with a request and then killed, it
// starts again; every time with the same argv and boot ID, appending to
// the same log. Everything is gone once Run returns.
func TestRestartExtra(t *testing.T) {
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("needs dbus-daemon (Debian's dbus-daemon package) for the machine's logind")
	}
	// A short directory: the bus and CSI sockets live below it.
	dir, err := os.MkdirTemp("", "fm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kubelet := filepath.Join(dir, "kubelet.sh")
	// All a kubelet must do here: create its plugin registry, then run.
	script := "#!/bin/sh\nfor a; do case $a in --root-dir=*) mkdir -p \"${a#--root-dir=}/plugins_registry\";; esac; done\nexec sleep 3600\n"
	if err := os.WriteFile(kubelet, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{
		Name: "m-1", Dir: filepath.Join(dir, "m-1"), Kubeconfig: "/dev/null", HollowKubelet: kubelet,
		SystemUUID: "0", VolumesDir: filepath.Join(dir, "volumes"),
		// $$ survives the exec: the line names the pid of the sleep.
		Extra: [][]string{{"/bin/sh", "-c", `echo "started pid $$ boot $FENCED_BOOT_ID"; exec sleep 3600`}},
	}
	for _, d := range []string{o.Dir, o.VolumesDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logw := &lockedWriter{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // as fenced-machine's main does; never unlocked
		ran <- Run(ctx, o, slog.New(slog.NewTextHandler(logw, nil)))
	}()
	extraLog := filepath.Join(o.Dir, "extra-0-sh.log")
	starts := func() []string {
		b, _ := os.ReadFile(extraLog)
		var s []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "started pid ") {
				s = append(s, l)
			}
		}
		return s
	}
	waitStarts := func(n int) (pid int, boot string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for len(starts()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("extra process started %d times, want %d; machine log:\n%s", len(starts()), n, logw.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		f := strings.Fields(starts()[n-1]) // started pid P boot B
		pid, _ = strconv.Atoi(f[2])
		return pid, f[4]
	}
	pid1, boot := waitStarts(1)
	if got, _ := os.ReadFile(filepath.Join(o.Dir, BootIDFile)); strings.TrimSpace(string(got)) != boot {
		t.Fatalf("extra process got boot ID %q, machine's is %q", boot, got)
	}
	// Run is the launcher here: the boot file names this process.
	if got, _ := os.ReadFile(filepath.Join(o.Dir, BootFile)); string(got) != strconv.Itoa(os.Getpid())+" "+boot+"\n" {
		t.Fatalf("boot file %q, want this process's pid %d and boot %s", got, os.Getpid(), boot)
	}

	// No request: a killed extra process stays down.
	must(t, syscall.Kill(pid1, syscall.SIGKILL))
	waitFor(t, logw, "process exited", 1)
	time.Sleep(500 * time.Millisecond)
	if n := len(starts()); n != 1 {
		t.Fatalf("extra process started %d times after a kill without a restart request, want 1", n)
	}

	// A request and SIGUSR1: the dead process starts again.
	request := RestartRequestFile(o.Dir, 0)
	must(t, os.WriteFile(request, nil, 0o644))
	must(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
	pid2, boot2 := waitStarts(2)

	// A request, then a kill: restarted once the launcher sees the exit.
	must(t, os.WriteFile(request, nil, 0o644))
	must(t, syscall.Kill(pid2, syscall.SIGKILL))
	pid3, boot3 := waitStarts(3)
	if boot2 != boot || boot3 != boot {
		t.Errorf("boot IDs %s, %s, %s: a restart must keep the boot's", boot, boot2, boot3)
	}
	if pid2 == pid1 || pid3 == pid2 {
		t.Errorf("pids %d, %d, %d: want a new process each time", pid1, pid2, pid3)
	}
	if _, err := os.Stat(request); !os.IsNotExist(err) {
		t.Errorf("restart request still there after it was served (stat: %v)", err)
	}
	b, _ := os.ReadFile(extraLog)
	if n := strings.Count(string(b), "==== boot "+boot); n != 1 {
		t.Errorf("%d boot markers in the extra's log, want 1:\n%s", n, b)
	}
	if n := strings.Count(string(b), "==== restart in boot "+boot); n != 2 {
		t.Errorf("%d restart markers in the extra's log, want 2:\n%s", n, b)
	}
	waitFor(t, logw, "extra process restarted", 2)

	cancel()
	select {
	case err := <-ran:
		must(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after its context ended")
	}
	if err := syscall.Kill(pid3, 0); err == nil {
		t.Errorf("extra process %d still alive after Run returned", pid3)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until the machine log holds what at least n times.
func waitFor(t *testing.T, w *lockedWriter, what string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(w.String(), what) < n {
		if time.Now().After(deadline) {
			t.Fatalf("machine log does not say %q %d times:\n%s", what, n, w.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockedWriter is a log sink safe for the launcher's goroutines.
type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
