package harness

import (
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"testing"
)

// Standalone is the part of testing.TB the harness uses, for programs
// that run it outside `go test` (fenced-cluster, fenced-demo). Fatal
// panics with ErrFatal; Run recovers it and runs the cleanups.
type Standalone struct {
	testing.TB // nil: only the methods below are ever called
	mu         sync.Mutex
	cleanups   []func()
	failed     bool
}

// ErrFatal is what Standalone's Fatal panics with.
var ErrFatal = errors.New("harness: fatal")

// Run calls f with a Standalone, then runs its cleanups (also after a
// Fatal or a panic) and returns whether f failed.
func RunStandalone(f func(tb *Standalone)) (failed bool) {
	tb := &Standalone{}
	defer func() {
		r := recover()
		tb.runCleanups()
		Cleanup()
		if r != nil && r != ErrFatal {
			panic(r)
		}
		failed = r != nil || tb.Failed()
	}()
	f(tb)
	return false
}

func (s *Standalone) Helper()                           {}
func (s *Standalone) Logf(format string, args ...any)   { log.Printf(format, args...) }
func (s *Standalone) Fatal(args ...any)                 { s.fail(fmt.Sprint(args...)) }
func (s *Standalone) Fatalf(format string, args ...any) { s.fail(fmt.Sprintf(format, args...)) }

func (s *Standalone) fail(msg string) {
	log.Print("FATAL: ", msg)
	s.mu.Lock()
	s.failed = true
	s.mu.Unlock()
	panic(ErrFatal)
}

// Failed reports whether Fatal was called.
func (s *Standalone) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Cleanup registers f to run when RunStandalone returns, last first.
func (s *Standalone) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

// TempDir returns a new directory removed at cleanup.
func (s *Standalone) TempDir() string {
	d, err := os.MkdirTemp("", "fenced-standalone-")
	if err != nil {
		s.Fatal(err)
	}
	s.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func (s *Standalone) runCleanups() {
	s.mu.Lock()
	c := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}
