package taint

import rbacv1 "k8s.io/api/rbac/v1"

// PolicyRules returns the RBAC rules the package needs, and no more: the
// table in the package documentation as ClusterRole rules. The integration
// test binds exactly these and checks both that they suffice and that each
// verb is needed. A new slice on every call, so callers may modify it.
func PolicyRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
}
