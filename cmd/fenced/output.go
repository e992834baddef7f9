package main

import (
	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/printer"
)

// outputFlags gives cmd the output flags every printing command has (-o,
// --no-headers, --template, --allow-missing-template-keys) and checks them
// before it runs: a wrong -o is a usage error, before anything is read or
// switched.
func outputFlags(cmd *cobra.Command) *printer.Flags {
	out := printer.NewFlags()
	out.AddFlags(cmd)
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := out.Validate(); err != nil {
			return &usageError{command: cmd.CommandPath(), err: err}
		}
		return nil
	}
	return out
}
