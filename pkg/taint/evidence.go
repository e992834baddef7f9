package taint

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"fenced.io/fenced/pkg/fencing/core"
)

// The evidence itself, and the rule of what counts as evidence on its own
// (core.Evidence.Validate), are the core's; here is what only the API can
// add: the annotation it is stored in, and whether it fits the Node.

// checkEvidence rejects evidence that is about something other than the
// Node as it is now: a different boot (the node came back since) or a
// different machine (the BMC's GUID is not the node's system UUID). Errors
// wrap core.ErrInvalidEvidence.
func checkEvidence(ev core.Evidence, n *corev1.Node) error {
	if ev.BootID != "" && n.Status.NodeInfo.BootID != "" && ev.BootID != n.Status.NodeInfo.BootID {
		return fmt.Errorf("%w: evidence is for boot %s but node %s now reports boot %s (it restarted since)",
			core.ErrInvalidEvidence, ev.BootID, n.Name, n.Status.NodeInfo.BootID)
	}
	if bad := ev.BMC.GUIDMismatch(n.Status.NodeInfo.SystemUUID); bad != nil {
		return fmt.Errorf("%w: BMC %q reports system GUID %s but node %s has systemUUID %s (wrong BMC for this node?)",
			core.ErrInvalidEvidence, bad.Endpoint, bad.SystemGUID, n.Name, n.Status.NodeInfo.SystemUUID)
	}
	return nil
}

// encodeEvidence is the value of AnnotationEvidence for ev.
func encodeEvidence(ev core.Evidence) (string, error) {
	raw, err := json.Marshal(ev)
	return string(raw), err
}

// EvidenceOf parses the node's AnnotationEvidence. ok is false when the node
// has no such annotation; err is set when it has one that does not parse.
// What it says is not checked: anyone who may update Nodes can write it.
func EvidenceOf(n *corev1.Node) (ev core.Evidence, ok bool, err error) {
	if n == nil {
		return core.Evidence{}, false, nil
	}
	raw, ok := n.Annotations[AnnotationEvidence]
	if !ok {
		return core.Evidence{}, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		return core.Evidence{}, true, fmt.Errorf("node %s: annotation %s: %w", n.Name, AnnotationEvidence, err)
	}
	return ev, true, nil
}
