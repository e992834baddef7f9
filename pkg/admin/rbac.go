package admin

import (
	rbacv1 "k8s.io/api/rbac/v1"

	"fenced.io/fenced/pkg/taint"
)

// What a person needs to run the operator commands, as RBAC rules: the
// ClusterRole and the Role fenced-operator of deploy/ (bound to nobody by
// default: docs/operations.md, "Who may run the operator commands").
// test/deploy compares the manifests with these and runs the commands
// with them against a real API server: change them together.
//
// Not granted: reading Secrets, changing the fencers' configuration,
// writing Leases (the power Leases are the fencers' alone, the key Leases
// each node's own), deleting Nodes or VolumeAttachments (`fenced diagnose
// --fix` needs the opt-in of deploy/daemonset/components/delete-stale-volumeattachments
// or an administrator).

// OperatorClusterRules are the cluster-wide rules of the operator
// commands. A new slice on every call, so callers may modify it.
func OperatorClusterRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		// status and NODE completion list; confirm and unfence get and
		// update (taint.Tainter, as fencers write the taint); exclude and
		// include patch the label.
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch", "update"}},
		// confirm marks the node Ready=False and force-deletes its pods
		// (taint.PolicyRules); diagnose lists pods.
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "delete"}},
		// Every command that changes something says who and why in an
		// Event (on the Node, in "default"; on the pause ConfigMap, in
		// fenced's namespace); diagnose reads them.
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "create", "patch"}},
		// diagnose: which pods use which claims, bound to which volumes.
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes", "persistentvolumeclaims"}, Verbs: []string{"list"}},
		// unfence checks that no VolumeAttachment of the node is left;
		// diagnose lists them.
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"list"}},
		// diagnose: the owners of a waiting pod.
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "replicasets"}, Verbs: []string{"list"}},
		// Who runs the command, for the Events and the history.
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}, Verbs: []string{"create"}},
	}
}

// OperatorNamespaceRules are the rules of the operator commands in fenced's
// namespace (fencer.leaseNamespace). A new slice on every call.
func OperatorNamespaceRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		// pause and resume: the one pause ConfigMap.
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{taint.PauseConfigMap}, Verbs: []string{"get", "update"}},
		// history reads, confirm and unfence append (taint.AppendHistory).
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{taint.HistoryConfigMap}, Verbs: []string{"get", "update"}},
		// Either is created when absent: a create cannot name its object,
		// so an operator may create ConfigMaps here — but change no other
		// one (not the fencers' configuration).
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		// status reads what the fencers publish on their Leases; diagnose
		// the agents' graceful shutdown. Read only.
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list"}},
	}
}
