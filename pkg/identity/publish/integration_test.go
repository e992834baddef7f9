package publish

import (
	"testing"

	"fenced.io/fenced/internal/testbed/cluster"
)

// TestPolicyInForceAPIServer runs policyCases against a real API server,
// which defaults and validates what is installed: a policy the API server
// would not take cannot make a case pass, and its defaults (match policy,
// selectors, scopes) must not make the shipped objects look altered.
func TestPolicyInForceAPIServer(t *testing.T) {
	ctx, c := cluster.StartForTest(t, cluster.Options{NoScheduler: true})
	for _, pc := range policyCases() {
		t.Run(pc.name, func(t *testing.T) { checkPolicyCase(ctx, t, c.Client(), pc) })
	}
}
