package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/taint"
)

// consentFlags adds --yes and --reason to a command that can do harm
// (admin.Consent): the same two flags, with the same words, on each.
func consentFlags(cmd *cobra.Command, c *admin.Consent, reason *string, recorded string) {
	fl := cmd.Flags()
	fl.BoolVar(&c.Yes, "yes", false, "do not ask; required without a terminal (without it and without a terminal nothing is done, exit 2)")
	fl.StringVar(reason, "reason", "", "why (recorded in "+recorded+")")
}

// firstArg is a command's optional argument (history's NODE, diagnose's
// target): "" when none was given.
func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// checkConsent takes the y/N answer from standard input when it is a
// terminal and, when nobody can answer and --yes is missing, stops the
// command before it does anything: a usage error (exit 2), with the hint
// to --help. pkg/admin checks again where it asks (admin.ErrNeedsYes,
// which exitCode maps to 2 as well).
func checkConsent(cmd *cobra.Command, c *admin.Consent) error {
	stdinConsent(c)
	if err := c.Check(); err != nil {
		return &usageError{command: cmd.CommandPath(), err: err}
	}
	return nil
}

// stdinConsent takes the y/N answer from standard input when it is a
// terminal.
func stdinConsent(c *admin.Consent) {
	c.Terminal, c.In = term.IsTerminal(int(os.Stdin.Fd())), os.Stdin
}

// allowPower gets the go-ahead for a power action by hand (bmc, device)
// and records it in an Event on the Node (admin.Operator.AllowPower); call
// done once the action is over, so that the Event is sent before the
// command exits. It asks the API server only who the caller is and takes
// the Event: without a Kubernetes configuration it says that nothing will
// be recorded and goes on, because switching a machine by hand must work
// when the cluster does not (a control plane that hangs is a reason to
// run it). Its words go to standard error: standard output is the result.
func (g *globals) allowPower(cmd *cobra.Command, component string, p admin.PowerByHand) (done func(), err error) {
	op := &admin.Operator{Out: g.stderr, Log: g.log}
	done = func() {}
	rc, err := g.restConfig()
	var client kubernetes.Interface
	if err == nil {
		client, err = kubernetes.NewForConfig(rc)
	}
	if err != nil {
		fmt.Fprintf(g.stderr, "WARNING: %v: no Event will record who did this\n", err)
	} else {
		op.Client = client
		op.Recorder, done = taint.NewRecorder(client, component)
	}
	if err := op.AllowPower(cmd.Context(), p); err != nil {
		done()
		return nil, err
	}
	return done, nil
}
