package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"fenced.io/fenced/pkg/config"
	"fenced.io/fenced/pkg/version"
)

// globals are the flags every command shares.
type globals struct {
	// kube are kubectl's flags (--kubeconfig, --context, -n, --as,
	// --request-timeout, --server, …), resolved the way kubectl resolves
	// them.
	kube       *genericclioptions.ConfigFlags
	configPath string
	logFormat  string
	verbosity  int

	stdout, stderr io.Writer
	log            *slog.Logger
}

// kubectlPluginName is the file name under which kubectl finds fenced as
// a plugin: with the binary installed (or linked) as kubectl-fenced on the
// PATH, `kubectl fenced status` runs `kubectl-fenced status`.
const kubectlPluginName = "kubectl-fenced"

// newRootCommand builds the command tree. name is the program's file
// name: run as kubectl-fenced, help and usage say "kubectl fenced".
func newRootCommand(name string, stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr, kube: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:   "fenced",
		Short: "Evidence-based fencing for bare-metal Kubernetes nodes",
		Long: `fenced makes node failures on bare-metal Kubernetes recover by themselves, safely.

When a node stops answering, fenced asks the node's BMC (IPMI or Redfish) for its
power state. Only when the BMC says the power is off (or the node announced a clean
shutdown, or an operator confirmed it) does fenced apply the taint
node.kubernetes.io/out-of-service, which lets Kubernetes force-detach the node's
volumes and restart its pods elsewhere. It removes the taint when the node is back.

A BMC that cannot be reached or says "on" never leads to a taint.`,
		Example: `  # check that the BMC credentials of a node work
  fenced bmc status worker-3 --config /etc/fenced/config.yaml

  # run the node agent
  fenced agent --config /etc/fenced/config.yaml`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return g.setupLogging(cmd)
		},
	}
	if name == kubectlPluginName {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fenced"}
	}
	// --version prints what `fenced version` prints.
	root.Version = version.String()
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{command: cmd.CommandPath(), err: err}
	})
	pf := root.PersistentFlags()
	g.kube.AddFlags(pf)
	pf.Lookup("kubeconfig").Usage = "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster service account)"
	pf.Lookup("namespace").Usage = "the namespace of the objects a command names (diagnose: POD, pvc/NAME; default: the kubeconfig's)"
	// kubectl's discovery cache: fenced does no discovery.
	_ = pf.MarkHidden("cache-dir")
	pf.StringVar(&g.configPath, "config", "",
		"fenced configuration file (default: $FENCED_CONFIG, then "+config.DefaultPath+")")
	pf.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	pf.CountVarP(&g.verbosity, "verbose", "v", "more detailed logs (-v: debug)")

	root.AddCommand(newVersionCommand(g), newAgentCommand(g), newBMCCommand(g), newDeviceCommand(g), newTopologyCommand(g), newConfirmCommand(g), newUnfenceCommand(g), newStatusCommand(g), newDiagnoseCommand(g), newCredentialsCommand(g), newConfigCommand(g), newHistoryCommand(g), newManCommand())
	for _, sc := range switchCommands {
		root.AddCommand(newSwitchCommand(g, sc))
	}
	refuseUnknownSubcommands(root)
	return root
}

func (g *globals) setupLogging(cmd *cobra.Command) error {
	level := slog.LevelInfo
	if g.verbosity > 0 {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	switch g.logFormat {
	case "text":
		g.log = slog.New(slog.NewTextHandler(g.stderr, opts))
	case "json":
		g.log = slog.New(slog.NewJSONHandler(g.stderr, opts))
	default:
		return &usageError{command: cmd.CommandPath(),
			err: fmt.Errorf("--log-format %q: want text or json", g.logFormat)}
	}
	// client-go logs through klog, in klog's own format and to the
	// process's stderr: its lines go into this log instead, in its format,
	// as the component client-go (with --log-format json, a line of klog's
	// format would break every pipeline that parses the log).
	klog.SetSlogLogger(g.log.With("component", "client-go"))
	return nil
}

// configFile resolves which configuration file to read, and whether the
// user asked for it explicitly (a missing default file is not an error for
// commands that can run without one).
func (g *globals) configFile() (path string, explicit bool) {
	if g.configPath != "" {
		return g.configPath, true
	}
	if env := os.Getenv("FENCED_CONFIG"); env != "" {
		return env, true
	}
	return config.DefaultPath, false
}

// loadConfig loads the configuration. With required=false a missing
// default file yields an empty configuration. Any failure is exit code 3:
// without its configuration a command cannot check anything.
func (g *globals) loadConfig(required bool) (*config.Config, error) {
	path, explicit := g.configFile()
	cfg, err := config.Load(path)
	switch {
	case err != nil && !explicit && !required && errors.Is(err, os.ErrNotExist):
		return &config.Config{Source: "(none)"}, nil
	case err != nil && !explicit && errors.Is(err, os.ErrNotExist):
		err = fmt.Errorf("no configuration: %s does not exist; pass --config or set FENCED_CONFIG", path)
	}
	if err != nil {
		return nil, &codedError{code: exitCannotCheck, err: err}
	}
	return cfg, nil
}

// errNoKubeconfig says what kubectl would only say as "connection to
// localhost:8080 refused".
var errNoKubeconfig = errors.New("no Kubernetes configuration found: pass --kubeconfig, set KUBECONFIG, or run in a pod with a service account")

// restConfig resolves the Kubernetes client configuration the way kubectl
// does (--kubeconfig, then $KUBECONFIG, then ~/.kube/config, then the
// in-cluster service account; its flags on top). Any failure is exit
// code 3: without a cluster to ask a command cannot check anything.
func (g *globals) restConfig() (*rest.Config, error) {
	cannot := func(err error) error { return &codedError{code: exitCannotCheck, err: err} }
	loader := g.kube.ToRawKubeConfigLoader()
	raw, err := loader.RawConfig()
	if err != nil {
		return nil, cannot(fmt.Errorf("kubeconfig: %w", err))
	}
	// With nothing configured kubectl's loader falls back to
	// localhost:8080 rather than saying so.
	if _, inCluster := rest.InClusterConfig(); len(raw.Clusters) == 0 && *g.kube.APIServer == "" && errors.Is(inCluster, rest.ErrNotInCluster) {
		return nil, cannot(errNoKubeconfig)
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, cannot(errNoKubeconfig)
		}
		return nil, cannot(fmt.Errorf("kubeconfig: %w", err))
	}
	cfg.UserAgent = version.UserAgent()
	return cfg, nil
}

// kubeNamespace is -n, else the kubeconfig's context's namespace
// ("default" when it names none), as kubectl uses them; explicit says
// that -n gave it.
func (g *globals) kubeNamespace() (ns string, explicit bool, err error) {
	ns, explicit, err = g.kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", false, &codedError{code: exitCannotCheck, err: fmt.Errorf("kubeconfig: %w", err)}
	}
	return ns, explicit, nil
}
