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
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/admin"
)

// Exit codes, stable for scripts, the same for every command
// (docs/operations.md, "Exit codes").
const (
	// exitOK: done, nothing to report.
	exitOK = 0
	// exitFailure: a finding (a pod stuck, a node that cannot be
	// fenced) or a refusal (a safety check, the API server or a device
	// said no), or a failure.
	exitFailure = 1
	// exitUsage: the command line is wrong: unknown subcommand or flag,
	// a bad argument or flag value, a node that does not exist, --yes
	// missing where nobody can answer y/N.
	exitUsage = 2
	// exitCannotCheck: fenced could not get the answer it needed, so it
	// says nothing: no kubeconfig, an API server that does not answer, no
	// or an unreadable configuration file, a power device that cannot be
	// reached.
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
	}
	return exitCode(err)
}

// exitCode is the exit code of a command's error: the one table of all
// commands.
func exitCode(err error) int {
	var (
		usage *usageError
		coded *codedError
	)
	switch {
	case err == nil:
		return exitOK
	// ErrNeedsYes before anything a refusal: nobody could answer y/N
	// and --yes is missing, a wrong command line for a script.
	case errors.As(err, &usage), errors.Is(err, admin.ErrUnknownNode), errors.Is(err, admin.ErrNeedsYes):
		return exitUsage
	case errors.As(err, &coded):
		return coded.code
	case admin.CannotCheck(err):
		return exitCannotCheck
	}
	return exitFailure
}

// refuseUnknownSubcommands makes every command that only groups others
// (fenced, fenced bmc, …) print its help when called alone, and refuse an
// unknown subcommand as a usage error: cobra would exit 1 for the root's
// and 0 with the help for the others'.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	if !cmd.Runnable() && cmd.HasSubCommands() {
		cmd.Args = cobra.ArbitraryArgs
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default, set only where it suggests itself
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			err := fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				err = fmt.Errorf("%w; did you mean %s?", err, strings.Join(s, " or "))
			}
			return &usageError{command: cmd.CommandPath(), err: err}
		}
	}
	for _, sub := range cmd.Commands() {
		refuseUnknownSubcommands(sub)
	}
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
