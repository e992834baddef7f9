package taint

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

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

// EvidenceFormat is the version of AnnotationEvidence's format this
// fenced writes, in the annotation's "v" field, and the newest it reads.
//
// Format 1 is the format of core.Evidence's JSON tags. Every fenced before
// the field existed wrote format 1 without it: an annotation with no "v" is
// format 1. Its shape grew over time only by optional fields that an older
// reader may ignore without misreading the rest (the BMC reading's sentAt
// and kubeletLeaseRenewedAt; a fencing level's level, plugs, device and
// plug; the method "watchdog" with its wait, which a fencer that does not
// know it adopts as any fence it did not make and ends, like every fence,
// on the node's return in another boot), so all of it is one format
// (TestEvidenceAnnotationHistory holds every shape ever written).
//
// The rule (docs/design.md, "The evidence annotation"): a change an older
// fencer could misread — a field whose meaning changes, one it must not
// ignore, one whose absence it would read as something else — is a new
// format, with this constant raised. A fencer meets a format newer than it
// reads (a newer fenced wrote it, during a rolling upgrade or after a
// rollback): EvidenceOf returns an *FormatError, and the fencer
// leaves that node alone. Whatever a future format holds, it is a JSON
// object with an integer "v": that is the one thing every reader can read.
const EvidenceFormat = 1

// evidenceAnnotation is AnnotationEvidence's value: the format version,
// then the evidence.
type evidenceAnnotation struct {
	V int `json:"v"`
	core.Evidence
}

// encodeEvidence is the value of AnnotationEvidence for ev, in the format
// EvidenceFormat.
func encodeEvidence(ev core.Evidence) (string, error) {
	raw, err := json.Marshal(evidenceAnnotation{V: EvidenceFormat, Evidence: ev})
	return string(raw), err
}

// FormatError is the error of EvidenceOf and ReturningOf for an
// annotation written in a format newer than this fenced reads: a newer
// fenced wrote it. The annotation is not read any further; what it says is
// that newer fenced's business, and this one must neither remove nor
// rewrite it.
type FormatError struct {
	Node string
	// Annotation is the annotation's key.
	Annotation string
	// Format is the annotation's "v"; Reads the newest this fenced reads.
	Format, Reads int
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("node %s: annotation %s was written by a newer fenced (format %d; this one reads formats up to %d): upgrade this fenced",
		e.Node, e.Annotation, e.Format, e.Reads)
}

// NewerFormat returns the format of the annotation err is about when err
// is (or wraps) a *FormatError, else 0.
func NewerFormat(err error) int {
	var fe *FormatError
	if errors.As(err, &fe) {
		return fe.Format
	}
	return 0
}

// readFormat reads annotation key of node n, whose value raw is a JSON
// object with an optional format version "v" (1 when absent), into into
// when its format is at most reads. The version is read first, alone: a
// newer format may hold anything else, also fields of the same names with
// other types. A newer format gives a *FormatError.
func readFormat(n *corev1.Node, key, raw string, reads int, into any) error {
	bad := func(err error) error {
		return fmt.Errorf("node %s: annotation %s: %w", n.Name, key, err)
	}
	var head struct {
		V json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal([]byte(raw), &head); err != nil {
		return bad(err)
	}
	format := 1
	if head.V != nil {
		v, err := strconv.Atoi(string(head.V))
		if err != nil || v < 1 {
			return bad(fmt.Errorf("format version %s is not a whole number from 1", head.V))
		}
		format = v
	}
	if format > reads {
		return &FormatError{Node: n.Name, Annotation: key, Format: format, Reads: reads}
	}
	if err := json.Unmarshal([]byte(raw), into); err != nil {
		return bad(err)
	}
	return nil
}

// EvidenceOf parses the node's AnnotationEvidence, in any format up to
// EvidenceFormat (one without "v" is format 1). ok is false when the node
// has no such annotation; err is set when it has one that does not parse,
// and is a *FormatError when it is in a newer format.
// What it says is not checked: anyone who may update Nodes can write it.
func EvidenceOf(n *corev1.Node) (ev core.Evidence, ok bool, err error) {
	if n == nil {
		return core.Evidence{}, false, nil
	}
	raw, ok := n.Annotations[AnnotationEvidence]
	if !ok {
		return core.Evidence{}, false, nil
	}
	var a evidenceAnnotation
	if err := readFormat(n, AnnotationEvidence, raw, EvidenceFormat, &a); err != nil {
		return core.Evidence{}, true, err
	}
	return a.Evidence, true, nil
}
