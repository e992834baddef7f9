// Package deploy carries the shipped manifests that the binaries check the
// cluster against, so that the check and the file cannot drift apart.
package deploy

import _ "embed"

// AgentIdentityPolicy is daemonset/base/agent-identity-policy.yaml: the
// ValidatingAdmissionPolicy and binding that bind agent keys to nodes.
// publish.PolicyInForce compares what is installed with it.
//
//go:embed daemonset/base/agent-identity-policy.yaml
var AgentIdentityPolicy []byte
