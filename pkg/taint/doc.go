// Package taint is fenced's only writer of Nodes and their pods: it applies
// and removes the node.kubernetes.io/out-of-service taint together with the
// evidence that justifies it (docs/design.md §2, §4), runs the fast path's
// writes (Ready=False, pod force-deletion), records Events, and holds the
// small Node readers the rest share (ReadyCondition, InternalIP, HasTaint).
// Its RBAC rules are what deploy/ grants.
//
// The taint makes the pod GC controller force-delete a node's terminating
// pods and the attach/detach controller force-detach its volumes. On a node
// that is still running that means two writers on one disk, so this package
// is the last gate before the write:
//
//   - Apply never writes without evidence (core.Evidence) that passes the
//     core's rule, core.Evidence.Validate — a known method and a time, a BMC
//     reading of "off" for bmc-power-off, never a reading of "on" — and
//     never when the evidence is about another boot or another machine than
//     the Node reports (checked here, against the Node as read before each
//     write).
//   - The evidence is stored as JSON in AnnotationEvidence, in the format
//     core.Evidence's JSON tags define, with its version (EvidenceFormat);
//     EvidenceOf decodes every format fenced ever wrote, and refuses a
//     newer one (FormatError), which Remove never removes.
//   - The taint and its annotations (AnnotationAppliedBy, AnnotationEvidence)
//     are written in one update, so no reader sees one without the other.
//   - fenced never claims or removes a taint it did not apply: a taint without
//     AnnotationAppliedBy is left alone (Remove returns ErrNotOurs).
//   - The out-of-service taint never comes off alone (returning.go): Remove
//     swaps it for fenced's ReturningTaintKey:NoExecute and changes the
//     cordon in one update, on a settled cordon only; Lift takes the
//     returning taint (and a cordon fenced set) off once the node lifecycle
//     controller has answered that change, re-checked on the Node it
//     writes. No version of the Node lacks both taints while a
//     controller-manager may still see the first.
//   - Every write is a read-modify-write with the resourceVersion just read,
//     retried from a fresh read on Conflict, so concurrent writers of the
//     Node (kubelet, node lifecycle controller, other fencers, operators)
//     lose nothing, and a decision is re-checked against the latest Node.
//   - Apply and Remove record a Normal Event on the Node
//     (OutOfServiceTaintApplied, OutOfServiceTaintRemoved).
//
// Whether a node should be fenced or unfenced is not decided here; that is
// the decision core's job (pkg/fencing/core).
//
// # RBAC
//
// The complete set of permissions the package uses (all in the core API
// group ""), from which deploy/ writes the fencer's ClusterRole. The
// integration test binds exactly these to a user and runs every operation as
// that user, and checks that each operation is forbidden without its verb.
//
//	resource      verbs          used by
//	------------  -------------  ----------------------------------------------
//	nodes         get, update    Apply, Remove, Lift (read, then update taints,
//	                             annotations and spec.unschedulable);
//	                             MarkNotReady and ForceDeletePods read the
//	                             Node (get)
//	nodes/status  update         MarkNotReady (Ready condition)
//	pods          list, delete   ForceDeletePods, all namespaces (list with
//	                             field selector spec.nodeName; delete with
//	                             grace period 0 and a UID precondition)
//	events        create, patch  NewRecorder's recorder; Node Events live in
//	                             namespace "default" (patch: repeated Events
//	                             are folded into a count)
//
// No patch on nodes or nodes/status is needed: every write is a full update
// conditional on the resourceVersion read, which is what makes the
// re-check-on-conflict possible. PolicyRules returns the same rules as RBAC
// objects.
package taint
