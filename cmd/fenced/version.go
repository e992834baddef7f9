package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/version"
)

func newVersionCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "Print the fenced version (the same line as fenced --version)",
		Example: "  fenced version\n  fenced version -o json",
		Args:    noArgs,
	}
	out := outputFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return out.Print(g.stdout, printer.Doc{Kind: "Version", Value: version.Get(),
			Text: func(w io.Writer, _ printer.TextOptions) error {
				_, err := fmt.Fprintln(w, version.String())
				return err
			}})
	}
	return cmd
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
