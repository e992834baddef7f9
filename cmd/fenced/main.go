// Command fenced applies Kubernetes' out-of-service taint to nodes whose BMC
// confirms they are powered off, and removes it when they are back.
//
// This package only wires: flags, configuration loading, building the
// pieces from pkg/, and signal handling.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

// Exit codes, stable for scripts.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitCannotCheck: a command that must check something with the API
	// server could not reach it or get the answer (fenced credentials).
	exitCannotCheck = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runAs(ctx, filepath.Base(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and maps errors to exit codes.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runAs(ctx, "fenced", args, stdout, stderr)
}

// runAs is run for a program called name (fenced, or kubectl-fenced when
// kubectl runs it as a plugin).
func runAs(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(name, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var silent *silentError
	if !errors.As(err, &silent) {
		fmt.Fprintf(stderr, "Error: %v\n", err)
	}
	var usage *usageError
	if errors.As(err, &usage) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", usage.command)
		return exitUsage
	}
	var coded *codedError
	if errors.As(err, &coded) {
		return coded.code
	}
	return exitFailure
}

// usageError marks a wrong command line (exit code 2).
type usageError struct {
	command string
	err     error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// silentError is a failure that the command already reported on its
// output (for example as JSON); run only sets the exit code.
type silentError struct{ err error }

func (e *silentError) Error() string { return e.err.Error() }
func (e *silentError) Unwrap() error { return e.err }

// codedError is a failure with an exit code of its own.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }
