package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/config"
)

func newConfigCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check a configuration file, or show it with every default filled in",
		Long: `Read a fenced configuration file offline: no API server, no BMC, no fence agent
is contacted. Password files and the CA files named in it are checked as the
agent checks them at start (they must exist and be private), so run it where
the agent runs, or expect those lines.`,
		Example: `  fenced config validate /etc/fenced/config.yaml
  fenced config view /etc/fenced/config.yaml`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "validate FILE",
		Short: "Check a configuration file and list every mistake in it",
		Long: `Parse and validate FILE as the agent does at start, and print every mistake in
it, one line each, as FILE:LINE: PATH: MESSAGE (LINE is left out where it is not
known), or "FILE: valid".

Exit codes: 0 valid, 1 the file has mistakes (listed), 2 usage error,
3 the file could not be read.`,
		Example: `  fenced config validate /etc/fenced/config.yaml
  kubectl -n fenced-system get configmap fenced -o jsonpath='{.data.config\.yaml}' > c.yaml &&
    fenced config validate c.yaml`,
		Args: exactlyOneFile,
		RunE: func(_ *cobra.Command, args []string) error {
			if _, err := parseConfigFile(g, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "%s: valid\n", args[0])
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "view FILE",
		Short: "Print the effective configuration, every default filled in",
		Long: `Print FILE as fenced runs it, as YAML: every setting the file leaves out at its
default, each node's BMC after inheriting bmc.defaults. Password files and
environment variables are named, never read into the output; inline passwords
are refused by validation. The output is itself a valid configuration.

Exit codes as for fenced config validate: a file with mistakes prints them
instead (1).`,
		Example: `  fenced config view /etc/fenced/config.yaml
  fenced config view /etc/fenced/config.yaml | grep -A3 fenceAfter`,
		Args: exactlyOneFile,
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := parseConfigFile(g, args[0])
			if err != nil {
				return err
			}
			out, err := yaml.Marshal(admin.EffectiveConfiguration(cfg))
			if err != nil {
				return err
			}
			_, err = g.stdout.Write(out)
			return err
		},
	})
	return cmd
}

// parseConfigFile loads path for the config commands: a file that cannot
// be read is exit code 3, a file with mistakes lists them on standard
// output, one a line prefixed with the file's name as compilers do, and is
// exit code 1.
func parseConfigFile(g *globals, path string) (*config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &codedError{code: exitCannotCheck, err: fmt.Errorf("cannot read the configuration: %w", err)}
	}
	cfg, err := config.Parse(data, path)
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		return cfg, err
	}
	for _, p := range cerr.Problems {
		if p.Line > 0 {
			line := p.Line
			p.Line = 0 // said once, as FILE:LINE
			fmt.Fprintf(g.stdout, "%s:%d: %s\n", path, line, p.Error())
		} else {
			fmt.Fprintf(g.stdout, "%s: %s\n", path, p.Error())
		}
	}
	return nil, &silentError{err: err}
}

func exactlyOneFile(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("expected exactly one FILE, got %d arguments", len(args))}
	}
	return nil
}
