package main

import (
	"github.com/spf13/cobra"

	"fenced.io/fenced/pkg/admin"
)

func newUnfenceCommand(g *globals) *cobra.Command {
	var o admin.UnfenceOptions
	cmd := &cobra.Command{
		Use:   "unfence NODE",
		Short: "Remove the out-of-service taint fenced applied, after checking the node is back",
		Long: `Remove the node.kubernetes.io/out-of-service taint that fenced applied to a node
(the fencer or 'fenced confirm'), together with its evidence annotations.

unfence prints and checks what the fencer checks before it removes a taint
itself: the node is Ready, it reports a boot ID other than the one recorded when
it was fenced (the same boot ID means it never rebooted, so it may never have
been off), and no VolumeAttachment of the node is left. Any failed check is a
refusal, unless --force, which removes the taint anyway and records that it did
(a Warning Event UnfenceForced naming you and your reason, and a log line).
--force asks y/N on a terminal before it skips a failed check; without a
terminal it does nothing, not even read, unless --yes (exit 2).

A taint that fenced did not apply (no fenced.io/applied-by annotation) is never
touched, with or without --force.

The taint comes off the way a fencer takes it off: in the same write,
fenced.io/returning:NoExecute takes its place and fenced cordons the node (unless
someone else already did). The controller-manager's node lifecycle controller
answers the cordon with its node.kubernetes.io/unschedulable taint, and that
answer shows its caches no longer hold the out-of-service taint; a fencer then
lifts fenced.io/returning and the cordon, usually within a second. Run unfence on
a node in that state and it lifts them itself once that answer is there; with
--force at once (recorded), for a cluster without a node lifecycle controller.

Exit codes: 0 removed or lifted (or no taint), 1 refused or failed, 2 usage error
(a NODE that does not exist, --force without --yes and without a terminal among
them), 3 could not check (no kubeconfig, the API server does not answer).`,
		Example: `  fenced unfence worker-3

  # the node is back but its old VolumeAttachment is stuck; you have checked it is safe
  fenced unfence worker-3 --force --reason "VA of a deleted PV, checked by J. Doe"`,
		Args:              exactlyOneNode,
		ValidArgsFunction: g.completeNodes(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Force {
				if err := checkConsent(cmd, &o.Consent); err != nil {
					return err
				}
			}
			op, done, err := g.newOperator("fenced-unfence")
			if err != nil {
				return err
			}
			defer done()
			o.Node = args[0]
			return op.Unfence(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "remove the taint even if checks fail (asked, and recorded in an Event and the log)")
	consentFlags(cmd, &o.Consent, &o.Reason, "the Events and the fence history")
	return cmd
}
