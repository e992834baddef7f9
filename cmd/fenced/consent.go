package main

import (
	"errors"
	"fmt"
	"io"
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

// powerSwitch finishes sub, one of bmc's or device's switches: it runs run
// on its NODE and, when op can do harm, takes --yes and --reason for it.
func powerSwitch(sub *cobra.Command, op admin.PowerOp, run func(cmd *cobra.Command, node string, byHand *admin.ByHand) error) *cobra.Command {
	byHand := &admin.ByHand{}
	sub.RunE = func(cmd *cobra.Command, args []string) error { return run(cmd, args[0], byHand) }
	if admin.Harmful(op) {
		consentFlags(sub, &byHand.Consent, &byHand.Reason, "the Event on the Node")
	}
	return sub
}

// firstArg is a command's optional NODE: "" when none was given.
func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// checkConsent takes the y/N answer from standard input when it is a
// terminal and, when nobody can answer and --yes is missing, stops the
// command before it does anything: a usage error (exit 2).
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

// usageIfNeedsYes maps admin.ErrNeedsYes, found by pkg/admin after the
// command line was checked, to the usage error checkConsent gives.
func usageIfNeedsYes(cmd *cobra.Command, err error) error {
	if errors.Is(err, admin.ErrNeedsYes) {
		return &usageError{command: cmd.CommandPath(), err: err}
	}
	return err
}

// auditor is an Operator that only asks the API server who the caller is
// and records Events: what bmc and device need to record a power action by
// hand. Without a Kubernetes configuration it says that nothing will be
// recorded and goes on: switching a machine by hand must work when the
// cluster does not (a control plane that hangs is a reason to run it).
func (g *globals) auditor(component string, out io.Writer) (*admin.Operator, func()) {
	op := &admin.Operator{Out: out, Log: g.log}
	rc, err := g.restConfig()
	var client kubernetes.Interface
	if err == nil {
		client, err = kubernetes.NewForConfig(rc)
	}
	if err != nil {
		fmt.Fprintf(out, "WARNING: %v: no Event will record who did this\n", err)
		return op, func() {}
	}
	op.Client = client
	rec, stop := taint.NewRecorder(client, component)
	op.Recorder = rec
	return op, stop
}
