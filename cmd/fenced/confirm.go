package main

import (
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/admin"
	"fenced.io/fenced/pkg/taint"
)

func newConfirmCommand(g *globals) *cobra.Command {
	var o admin.ConfirmOptions
	cmd := &cobra.Command{
		Use:   "confirm NODE",
		Short: "Confirm that a node is powered off and fence it (manual evidence)",
		Long: `Tell fenced that a node is really powered off, so that Kubernetes may restart its
pods and reattach its volumes elsewhere at once.

confirm first prints the evidence it can gather: the Node's Ready condition and
since when, its boot ID and taints, the gossip view of an agent (with --agent),
and the power state and system GUID read from the node's BMC when the node is in
the BMC inventory (--config). It refuses when the BMC reads the power ON (with
--power-off it switches the node off through the BMC instead, and goes on once it
reads off) and when the BMC's GUID is another machine's. A BMC that cannot be read
is no refusal: your word is then the only evidence, and confirm says so.

It then asks y/N on the terminal (without a terminal it does nothing, not even
read, unless --yes: exit 2),
and applies node.kubernetes.io/out-of-service=nodeshutdown:NoExecute with
"manual" evidence recording who you are (as the API server authenticates you),
when, your --reason and the BMC reading. It marks the node Ready=False,
force-deletes its pods, and records the Events OutOfServiceTaintApplied and
ManualFenceConfirmed on the Node. A node that already has the taint is left alone.

If the node is not really off, two machines will write to the same disks and
corrupt them.

Exit codes: 0 fenced (or nothing to do), 1 refused or failed, 2 usage error
(a NODE that does not exist, --yes missing without a terminal among them),
3 could not check (no kubeconfig, the API server does not answer).`,
		Example: `  # after checking in the data centre that worker-3 is off
  fenced confirm worker-3 --reason "PSU failed, checked by J. Doe on site"

  # from a script, switching it off through its BMC if it still reads on
  fenced confirm worker-3 --yes --power-off --reason "hung, ticket OPS-1234" \
      --config /etc/fenced/config.yaml --agent http://10.0.0.5:9740`,
		Args:              exactlyOneNode,
		ValidArgsFunction: g.completeNodes(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkConsent(cmd, &o.Consent); err != nil {
				return err
			}
			op, done, err := g.newOperator("fenced-confirm")
			if err != nil {
				return err
			}
			defer done()
			o.Node = args[0]
			return op.Confirm(cmd.Context(), o)
		},
	}
	fl := cmd.Flags()
	consentFlags(cmd, &o.Consent, &o.Reason, "the evidence, the Event and the fence history")
	fl.BoolVar(&o.PowerOff, "power-off", false, "if the BMC reads on, switch the node off (hard) through it and wait until it reads off")
	fl.StringVar(&o.AgentURL, "agent", "", "an agent's metrics endpoint (http://HOST:9740) for the gossip view; not checked without it")
	return cmd
}

// newOperator builds what confirm, unfence and status share
// (admin.NewOperator: a missing default configuration file just means no
// BMC inventory) and, for component != "", an Event recorder. done closes
// the BMC sessions and waits for the Events to be written, which are part
// of the evidence trail.
func (g *globals) newOperator(component string) (op *admin.Operator, done func(), err error) {
	cfg, err := g.loadConfig(false)
	if err != nil {
		return nil, nil, err
	}
	rc, err := g.restConfig()
	if err != nil {
		return nil, nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	if op, err = admin.NewOperator(cfg, client, g.stdout, g.log); err != nil {
		return nil, nil, err
	}
	stopRecorder := func() {}
	if component != "" {
		op.Recorder, stopRecorder = taint.NewRecorder(client, component)
	}
	return op, func() { op.Close(); stopRecorder() }, nil
}
