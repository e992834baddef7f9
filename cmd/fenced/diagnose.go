package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"fenced.io/fenced/pkg/admin"
)

func newDiagnoseCommand(g *globals) *cobra.Command {
	var (
		o             admin.DiagnoseOptions
		allNamespaces bool
	)
	cmd := &cobra.Command{
		Use:   "diagnose [POD | pvc/NAME | node/NAME]",
		Short: "Explain every Multi-Attach error, and cure the ones that are safe to cure (--fix)",
		Long: `Explain why pods cannot attach their volumes ("Multi-Attach error for volume ...
Volume is already exclusively attached to one node and can't be attached to another";
since Kubernetes v1.37 "Waiting for detach for volume ...").

diagnose finds the pods that cannot attach: those with a FailedAttachVolume
Event of either wording, and those not running whose ReadWriteOnce volume has
a VolumeAttachment on another node (or an attach/detach error, or whose
ReadWriteOncePod claim another pod holds). For each it names the volume, the node
that holds it, the cause, the objects that prove it (with ages and conditions),
what fenced is doing about it, and the fix as a command. The causes:

  dead-node           the holding node is not Ready: fence it (fenced does, on
                      evidence; or fenced confirm NODE)
  deleted-node        the VolumeAttachment names a Node that no longer exists
  stale-attachment    the holding node is Ready but nothing there uses the volume
  rolling-update-rwo  a Deployment with a ReadWriteOnce claim and RollingUpdate
                      started its new pod on another node: use Recreate
  shared-claim        another workload's pod uses the same claim on the other node
  readwriteoncepod    the ReadWriteOncePod claim is used by another pod
  attach-error        the CSI driver reports an attach or detach error
  in-use              a pod there still uses it and will release it (terminating)
  unknown             nothing holds it any more: the controller retries

Scope: POD and pvc/NAME are looked up in -n (default: the kubeconfig's
namespace); without an argument, or with node/NAME, every namespace is searched
unless -n is given. -A searches every namespace.

--all also lists latent risks: Deployments with a ReadWriteOnce claim and the
RollingUpdate strategy; StatefulSet pods with ReadWriteOnce volumes on nodes
without fencing configured (with --config: not in the BMC inventory) or whose
fence devices do not answer (the fencer's CannotBeFencedAutomatically Event, or
with --agent its fenced_node_fence_levels_ready metric); and nodes without the
kubelet's graceful node shutdown (shutdownGracePeriod). The kubelet's
configuration is not in the API: fenced's agent on each node looks for the
kubelet's logind shutdown delay lock (at start and every 5 minutes) and writes
what it found on its own Lease fenced-agent-<node>, annotation
fenced.io/graceful-shutdown: kubelet-delay-lock, none or unknown. diagnose
reads those Leases in fenced's namespace (fencer.leaseNamespace of --config,
else fenced-system) and lists the nodes whose agent said "none"; "unknown" (the
agent cannot reach logind) and nodes without an agent are not listed.

--fix cures what is safe, after printing the plan and asking y/N (without a
terminal it changes nothing unless --yes, and exits 2 once the plan is shown):
  - stale-attachment, deleted-node: deletes the VolumeAttachment, only if, read
    again right before, the node is Ready (or gone), no pod on it uses the volume
    and its kubelet does not list the volume in status.volumesInUse; deleted with
    a precondition on its UID and resourceVersion, so an object that changed
    since is not deleted (a refusal, not retried);
  - stale-attachment whose VolumeAttachment is already being deleted but not
    detached by its CSI driver (what a stale attachment looks like on
    Kubernetes 1.34: deleting it again changes nothing): removes its
    finalizers, after the same checks, with its resourceVersion as precondition;
  - dead-node: runs fenced confirm NODE with its evidence rules (refused when the
    node's BMC or a fencing level reads it on);
  - rolling-update-rwo: never changes a workload; prints the patch.
Each cure is recorded: an Event StaleVolumeAttachmentDeleted (or
StaleVolumeAttachmentReleased) on the VolumeAttachment (or confirm's Events on the Node) naming you, and a log line.

RBAC: diagnose only reads: get/list nodes, volumeattachments (storage.k8s.io),
persistentvolumes, and in every namespace pods, persistentvolumeclaims, events,
deployments and replicasets (apps); list leases (coordination.k8s.io) in
fenced's namespace (without it, no graceful-shutdown risk: a warning, not an
error); create selfsubjectreviews (who you are).
--fix also needs: delete and update volumeattachments; create and patch events; and for a
dead node what fenced confirm needs (get/update nodes and nodes/status,
list/delete pods).

-o name prints pod/NAME for each stuck pod; custom-columns has one row per
finding (.findings).

Exit codes: 0 nothing stuck (or everything cured), 1 something stuck (or a cure
refused or failed), 2 usage error (--fix without --yes and without a terminal
among them), 3 could not check (no kubeconfig, the API server does not answer,
an unreadable configuration).`,
		Example: `  # why is this pod stuck?
  fenced diagnose -n shop postgres-0

  # every stuck pod, and the risks that will cause the next one
  fenced diagnose --all

  # everything about one claim, as JSON
  fenced diagnose -n shop pvc/data-postgres-0 -o json

  # cure what is safe to cure, asking first
  fenced diagnose --fix --config /etc/fenced/config.yaml`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return &usageError{command: cmd.CommandPath(), err: fmt.Errorf("expected at most one POD, pvc/NAME or node/NAME, got %d arguments", len(args))}
			}
			return nil
		},
	}
	o.Output = outputFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		usage := func(err error) error { return &usageError{command: cmd.CommandPath(), err: err} }
		if o.Fix && !o.Output.IsText() {
			return usage(errors.New("--fix prints its plan and asks: it needs the text output"))
		}
		namespace, explicit, err := g.kubeNamespace()
		if err != nil {
			return err
		}
		if allNamespaces && explicit {
			return usage(errors.New("-n and -A exclude each other"))
		}
		pod, claim, node, err := admin.ParseTarget(firstArg(args))
		if err != nil {
			return usage(err)
		}
		o.Scope.Pod, o.Scope.Claim, o.Scope.Node = pod, claim, node
		// -n, else for a POD or pvc/NAME the kubeconfig's namespace;
		// else every namespace.
		if explicit || (!allNamespaces && (pod != "" || claim != "")) {
			o.Scope.Namespace = namespace
		}
		op, done, err := g.newOperator("fenced-diagnose")
		if err != nil {
			return err
		}
		defer done()
		stdinConsent(&o.Consent)
		o.Color = colorTerminal(g)
		_, err = op.Diagnose(cmd.Context(), o)
		if errors.Is(err, admin.ErrStuck) {
			return &silentError{err: err}
		}
		return err
	}
	fl := cmd.Flags()
	fl.BoolVarP(&allNamespaces, "all-namespaces", "A", false, "search every namespace")
	fl.BoolVar(&o.Scope.Risks, "all", false, "also list latent risks (RollingUpdate with ReadWriteOnce, unfenceable nodes, no graceful node shutdown)")
	fl.BoolVar(&o.Fix, "fix", false, "cure what is safe to cure, after showing the plan and asking")
	fl.BoolVar(&o.Yes, "yes", false, "with --fix: do not ask; required without a terminal")
	fl.StringVar(&o.AgentURL, "agent", "", "an agent's metrics endpoint (http://HOST:9740): which nodes' fencing levels answer")
	return cmd
}

// colorTerminal reports whether stdout is a terminal that wants colour
// (NO_COLOR unset).
func colorTerminal(g *globals) bool {
	f, ok := g.stdout.(*os.File)
	return ok && os.Getenv("NO_COLOR") == "" && term.IsTerminal(int(f.Fd()))
}
