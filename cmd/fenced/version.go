package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/version"
)

func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the fenced version (the same line as fenced --version)",
		Example: "  fenced version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(g.stdout, version.String())
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
