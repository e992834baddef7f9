package stale

import rbacv1 "k8s.io/api/rbac/v1"

// PolicyRules are what the Reporter needs besides what a fencer has
// already (Nodes and VolumeAttachments get/list/watch, Events
// create/patch): its Pod, PersistentVolume and PersistentVolumeClaim
// informers. deploy/daemonset/base/rbac.yaml grants them to the fencer;
// test/deploy compares. A new slice on every call.
func PolicyRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "persistentvolumes", "persistentvolumeclaims"}, Verbs: []string{"list", "watch"}},
	}
}

// DeletePolicyRules are what policy.deleteStaleVolumeAttachments needs on
// top of PolicyRules: the re-check reads the PersistentVolume and the
// claims again (the VolumeAttachment, the Node and the node's pods with
// verbs the fencer has), then deletes — or, for one stuck in deletion,
// updates it to remove its finalizers. Never in the default manifests:
// deploy/daemonset/components/delete-stale-volumeattachments is the
// opt-in. A new slice on every call.
func DeletePolicyRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"delete", "update"}},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes", "persistentvolumeclaims"}, Verbs: []string{"get"}},
	}
}
