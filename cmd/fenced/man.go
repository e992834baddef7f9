package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"fenced.io/fenced/pkg/version"
)

// newManCommand generates the man pages from the command tree, so they
// cannot drift from --help. Hidden: packagers run it (`make man`), users
// read the pages.
func newManCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write a man page for every command into DIR (section 1)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // same source, same pages
			header := &doc.GenManHeader{Title: "FENCED", Section: "1", Source: "fenced " + version.Version(), Manual: "fenced manual"}
			if err := doc.GenManTree(root, header, dir); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "man pages written to %s\n", dir)
			return nil
		},
	}
}
