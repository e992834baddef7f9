package taint

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The operator's switches that live in the cluster (policy.dryRun lives in
// the configuration file): a label that excludes one Node from fencing, and
// a ConfigMap that pauses every fencer. What each holds back is the decision
// core's rule (core.HeldBy); these are only the words.
const (
	// ExcludeLabel, with value "true" on a Node, excludes it from fencing:
	// no automatic power read, taint or power action.
	ExcludeLabel = "fenced.io/exclude"
	// Medik8sExcludeLabel is medik8s' label with the same meaning for its
	// remediators (set by its Node Maintenance Operator during planned
	// maintenance): fenced honours it, with value "true" as medik8s does.
	Medik8sExcludeLabel = "remediation.medik8s.io/exclude-from-remediation"

	// PauseConfigMap is the ConfigMap, in fenced's namespace (the lease
	// namespace), whose key PauseKey set to "true" pauses every fencer;
	// PauseReasonKey is an optional reason shown in Events and logs.
	PauseConfigMap = "fenced-pause"
	PauseKey       = "paused"
	PauseReasonKey = "reason"
)

// ExcludeValue is the value of ExcludeLabel that `fenced exclude` writes;
// ExcludedBy takes it in any case, with spaces around it.
const ExcludeValue = "true"

// SetPaused writes the pause into cm's data as Paused reads it: paused
// with reason (no reason key when empty), or not paused ("false", the
// reason dropped). Only `fenced pause` and `fenced resume` write it; the
// reader and the writer live here together so that they cannot drift.
func SetPaused(cm *corev1.ConfigMap, paused bool, reason string) {
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[PauseKey] = strconv.FormatBool(paused)
	if reason = strings.TrimSpace(reason); paused && reason != "" {
		cm.Data[PauseReasonKey] = reason
	} else {
		delete(cm.Data, PauseReasonKey)
	}
}

// ExcludedBy returns the label that excludes n from fencing, or "".
func ExcludedBy(n *corev1.Node) string {
	for _, l := range []string{ExcludeLabel, Medik8sExcludeLabel} {
		if isTrue(n.Labels[l]) {
			return l
		}
	}
	return ""
}

// Paused reads the pause ConfigMap (nil: absent, not paused): whether it
// pauses fencing, and its reason.
func Paused(cm *corev1.ConfigMap) (paused bool, reason string) {
	if cm == nil || cm.Name != PauseConfigMap {
		return false, ""
	}
	return isTrue(cm.Data[PauseKey]), strings.TrimSpace(cm.Data[PauseReasonKey])
}

// isTrue accepts "true" in any case, with spaces around it, as kubectl
// users type it; anything else — "false", "", "yes" — is not true.
func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }
