package shutdown

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fenced.io/fenced/pkg/vocab"
)

// journal records, in order, what the Watcher did to the ring, the lock
// and the mount table, so that tests can check the order of events.
type journal struct {
	mu      sync.Mutex
	entries []string
	changed chan struct{}
}

func newJournal() *journal { return &journal{changed: make(chan struct{}, 100)} }

func (j *journal) add(entry string) {
	j.mu.Lock()
	j.entries = append(j.entries, entry)
	j.mu.Unlock()
	select {
	case j.changed <- struct{}{}:
	default:
	}
}

func (j *journal) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

// waitFor waits until the journal holds entry.
func (j *journal) waitFor(t *testing.T, entry string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !slices.Contains(j.list(), entry) {
		select {
		case <-j.changed:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no %q in %q", entry, j.list())
		}
	}
}

// fakeLogind is one connection to a scripted logind.
type fakeLogind struct {
	j       *journal
	delay   time.Duration
	signals chan bool
	lockErr error
}

func (l *fakeLogind) InhibitDelayMax() (time.Duration, error) { return l.delay, nil }
func (l *fakeLogind) InhibitShutdown(who, why string) (io.Closer, error) {
	if l.lockErr != nil {
		return nil, l.lockErr
	}
	l.j.add("lock")
	return closer{l.j}, nil
}
func (l *fakeLogind) PrepareForShutdown() <-chan bool { return l.signals }
func (l *fakeLogind) Close() error                    { return nil }

type closer struct{ j *journal }

func (c closer) Close() error { c.j.add("release"); return nil }

type fakeRing struct{ j *journal }

func (r fakeRing) Announce(state vocab.Announcement) error {
	r.j.add("announce " + string(state))
	return nil
}
func (r fakeRing) Leave(timeout time.Duration) error { r.j.add("leave"); return nil }

// fakeMounts serves a mount table the test changes.
type fakeMounts struct {
	mu      sync.Mutex
	mounts  []string
	err     error
	changed chan struct{}
}

func newFakeMounts(m ...string) *fakeMounts {
	return &fakeMounts{mounts: m, changed: make(chan struct{}, 1)}
}

func (m *fakeMounts) set(err error, mounts ...string) {
	m.mu.Lock()
	m.mounts, m.err = mounts, err
	m.mu.Unlock()
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

func (m *fakeMounts) CSIMounts() ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mounts), m.err
}

func (m *fakeMounts) WaitChange(ctx context.Context, timeout time.Duration) error {
	select {
	case <-m.changed:
	case <-time.After(timeout):
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

const mountA = "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-a/mount"

// rig runs a Watcher against fakes.
type rig struct {
	j      *journal
	logind *fakeLogind
	mounts *fakeMounts
	w      *Watcher
	cancel context.CancelFunc
	done   chan error
}

func startRig(t *testing.T, delay time.Duration, mounts ...string) *rig {
	t.Helper()
	j := newJournal()
	r := &rig{j: j, logind: &fakeLogind{j: j, delay: delay, signals: make(chan bool, 4)}, mounts: newFakeMounts(mounts...),
		done: make(chan error, 1)}
	r.w = New(Config{
		Dial: func() (Logind, error) { return r.logind, nil }, Ring: fakeRing{j}, Mounts: r.mounts,
		OnLock: func(held bool) {
			if held {
				j.add("on-lock held")
			} else {
				j.add("on-lock released")
			}
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	j.waitFor(t, "lock")
	return r
}

func (r *rig) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func (r *rig) waitLeft(t *testing.T) Result {
	t.Helper()
	select {
	case <-r.w.Left():
		return r.w.Result()
	case <-time.After(20 * time.Second):
		t.Fatalf("the Watcher did not leave; journal %q", r.j.list())
		return Result{}
	}
}

// TestCleanShutdown: shutdown-complete is announced only once the last
// CSI mount is gone, and the lock is released only after the leave.
func TestCleanShutdown(t *testing.T) {
	r := startRig(t, 30*time.Second, mountA)
	r.logind.signals <- true
	r.j.waitFor(t, "announce "+string(vocab.AnnounceShuttingDown))
	time.Sleep(100 * time.Millisecond) // mounts still there: nothing more may happen
	if got := r.j.list(); len(got) != 3 {
		t.Fatalf("with a CSI volume still mounted the Watcher went on: %q", got)
	}
	r.mounts.set(nil)
	res := r.waitLeft(t)
	want := []string{"lock", "on-lock held", "announce shutting-down", "announce shutdown-complete", "leave", "release", "on-lock released"}
	if got := r.j.list(); !slices.Equal(got, want) {
		t.Fatalf("journal %q, want %q", got, want)
	}
	if !res.Complete || len(res.Mounts) != 0 {
		t.Errorf("result %+v, want complete", res)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run after a handled shutdown: %v", err)
	}
}

// TestShutdownWithoutCompletion covers every way the host can fail to
// prove that it is done with its volumes: shutdown-complete is never
// announced, the agent still leaves and releases the lock (so that the
// shutdown is not held up), and fencers fall back to the BMC.
func TestShutdownWithoutCompletion(t *testing.T) {
	tests := []struct {
		name  string
		delay time.Duration
		setup func(r *rig)
		// stopMidWait cancels Run during the wait (the service manager
		// stopping the agent).
		stopMidWait bool
		wantMounts  []string
	}{
		{name: "mounts remain until the delay runs out", delay: 2 * time.Second, wantMounts: []string{mountA}},
		{name: "mount table unreadable", delay: 2 * time.Second, setup: func(r *rig) { r.mounts.set(errors.New("EACCES")) }},
		{name: "no delay granted by logind", delay: 0, wantMounts: []string{mountA}},
		{name: "stopped while mounts remain", delay: time.Minute, stopMidWait: true, wantMounts: []string{mountA}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startRig(t, tt.delay, mountA)
			if tt.setup != nil {
				tt.setup(r)
			}
			r.logind.signals <- true
			r.j.waitFor(t, "announce "+string(vocab.AnnounceShuttingDown))
			if tt.stopMidWait {
				r.cancel()
			}
			res := r.waitLeft(t)
			want := []string{"lock", "on-lock held", "announce shutting-down", "leave", "release", "on-lock released"}
			if got := r.j.list(); !slices.Equal(got, want) {
				t.Fatalf("journal %q, want %q", got, want)
			}
			if res.Complete || !slices.Equal(res.Mounts, tt.wantMounts) {
				t.Errorf("result %+v, want incomplete with mounts %q", res, tt.wantMounts)
			}
		})
	}
}

// TestStoppedAfterUnmount: stopped by the service manager while waiting,
// when the mounts are already gone, the agent still announces.
func TestStoppedAfterUnmount(t *testing.T) {
	r := startRig(t, time.Minute, mountA)
	r.logind.signals <- true
	r.j.waitFor(t, "announce "+string(vocab.AnnounceShuttingDown))
	r.mounts.mu.Lock()
	r.mounts.mounts = nil // no change notification: only the last look sees it
	r.mounts.mu.Unlock()
	r.cancel()
	if res := r.waitLeft(t); !res.Complete {
		t.Fatalf("result %+v, want complete", res)
	}
}

// TestShutdownCancelled: a cancellation before the leave takes the agent
// back to running with the lock still held, ready for the next shutdown;
// a cancellation after the leave makes Run fail so the agent restarts.
func TestShutdownCancelled(t *testing.T) {
	r := startRig(t, time.Minute, mountA)
	r.logind.signals <- true
	r.j.waitFor(t, "announce "+string(vocab.AnnounceShuttingDown))
	r.logind.signals <- false
	r.j.waitFor(t, "announce "+string(vocab.AnnounceRunning))
	if got := r.j.list(); slices.Contains(got, "release") || slices.Contains(got, "leave") {
		t.Fatalf("cancelled shutdown released the lock or left: %q", got)
	}

	r.logind.signals <- true
	r.mounts.set(nil)
	if res := r.waitLeft(t); !res.Complete {
		t.Fatalf("second shutdown: %+v", res)
	}
	r.logind.signals <- false
	select {
	case err := <-r.done:
		r.done <- err
		if !errors.Is(err, ErrCancelledAfterLeave) {
			t.Fatalf("Run: %v, want ErrCancelledAfterLeave", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after a cancellation that came after the leave")
	}
}

// TestLogindUnreachable: without logind the Watcher announces nothing,
// keeps retrying, and takes the lock once logind is there.
func TestLogindUnreachable(t *testing.T) {
	j := newJournal()
	var (
		mu    sync.Mutex
		tries int
	)
	l := &fakeLogind{j: j, delay: time.Minute, signals: make(chan bool)}
	var logs strings.Builder
	var logMu sync.Mutex
	w := New(Config{
		Dial: func() (Logind, error) {
			mu.Lock()
			defer mu.Unlock()
			tries++
			if tries < 3 {
				return nil, errors.New("dial unix /run/dbus/system_bus_socket: no such file")
			}
			return l, nil
		},
		Ring: fakeRing{j}, Mounts: newFakeMounts(), RetryInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			logMu.Lock()
			defer logMu.Unlock()
			return logs.Write(p)
		}), nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	j.waitFor(t, "lock")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if n := strings.Count(logs.String(), "clean-shutdown announcements are off"); n != 1 {
		t.Errorf("want exactly one warning while logind is unreachable, got %d:\n%s", n, logs.String())
	}
	if got := j.list(); !slices.Equal(got, []string{"lock", "release"}) {
		t.Errorf("journal %q", got)
	}
}

// TestLogindConnectionLost: when the bus connection drops, the Watcher
// reconnects and takes a new lock.
func TestLogindConnectionLost(t *testing.T) {
	r := startRig(t, time.Minute)
	first := r.logind
	r.logind = &fakeLogind{j: r.j, delay: time.Minute, signals: make(chan bool, 4)}
	r.w.c.RetryInterval = 10 * time.Millisecond
	close(first.signals)
	deadline := time.Now().Add(20 * time.Second)
	countLocks := func() int {
		n := 0
		for _, e := range r.j.list() {
			if e == "lock" {
				n++
			}
		}
		return n
	}
	for countLocks() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no second lock: %q", r.j.list())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := r.j.list(); !slices.Equal(got[:5], []string{"lock", "on-lock held", "release", "on-lock released", "lock"}) {
		t.Errorf("journal %q", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestBudget(t *testing.T) {
	w := New(Config{})
	for _, tt := range []struct{ delay, wait, leave time.Duration }{
		{30 * time.Second, 22 * time.Second, 5 * time.Second},
		{5 * time.Second, 2 * time.Second, 2500 * time.Millisecond},
		{0, 0, 0},
	} {
		if wait, leave := w.budget(tt.delay); wait != tt.wait || leave != tt.leave {
			t.Errorf("budget(%s) = %s, %s; want %s, %s", tt.delay, wait, leave, tt.wait, tt.leave)
		}
	}
}

// TestStoppedWithHostRunning: the agent knows its stop is not the host's
// only when the Watcher held its lock, with no shutdown under way, as it
// was stopped; stopped in the middle of a shutdown, or without the lock
// (logind unreachable), it cannot say so.
func TestStoppedWithHostRunning(t *testing.T) {
	t.Run("lock held, no shutdown", func(t *testing.T) {
		r := startRig(t, time.Minute)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if !r.w.StoppedWithHostRunning() {
			t.Error("stopped holding the lock with no shutdown under way: want true")
		}
	})
	t.Run("in the middle of a shutdown", func(t *testing.T) {
		r := startRig(t, time.Minute, mountA)
		r.logind.signals <- true
		r.j.waitFor(t, "announce "+string(vocab.AnnounceShuttingDown))
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if r.w.StoppedWithHostRunning() {
			t.Error("stopped during the host's shutdown: want false")
		}
	})
	t.Run("after a cancelled shutdown", func(t *testing.T) {
		r := startRig(t, time.Minute, mountA)
		r.logind.signals <- true
		r.j.waitFor(t, "announce "+string(vocab.AnnounceShuttingDown))
		r.logind.signals <- false
		r.j.waitFor(t, "announce "+string(vocab.AnnounceRunning))
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if !r.w.StoppedWithHostRunning() {
			t.Error("stopped after the shutdown was cancelled, lock held: want true")
		}
	})
	t.Run("logind unreachable", func(t *testing.T) {
		w := New(Config{Dial: func() (Logind, error) { return nil, errors.New("no bus") }, Ring: fakeRing{newJournal()},
			Mounts: newFakeMounts(), RetryInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := w.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if w.StoppedWithHostRunning() {
			t.Error("without the lock: want false")
		}
	})
}
