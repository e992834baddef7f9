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

// FenceOrderPolicy is daemonset/base/fence-order-policy.yaml: the
// ValidatingAdmissionPolicy and binding that let only fencers write or
// delete fence orders. publish.OrderPolicyInForce compares what is
// installed with it.
//
//go:embed daemonset/base/fence-order-policy.yaml
var FenceOrderPolicy []byte
