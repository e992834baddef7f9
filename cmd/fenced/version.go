package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the fenced version",
		Example: "  fenced version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(g.stdout, "fenced %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// noArgs and exactlyOneNode return usage errors (exit code 2).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("unexpected argument %q", args[0])}
	}
	return nil
}

func exactlyOneNode(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("expected exactly one NODE, got %d arguments", len(args))}
	}
	return nil
}
