// Package diagnose explains why a pod cannot attach its volume (the
// "Multi-Attach error" of the attach/detach controller) and decides which
// of those causes is safe to cure.
//
// It is pure, like pkg/fencing/core: it reads a Snapshot of API objects that the
// caller gathered (pkg/admin for `fenced diagnose`, pkg/fencing for the
// agent's stale-attachment report) and returns Findings and Risks; it
// never talks to the API server, so every rule is a table test
// (TestDiagnoseStaysPure keeps client-go out).
//
// The rule that lets anything delete a VolumeAttachment lives here once,
// in StaleAttachment: `fenced diagnose --fix`, the fencer's report and its
// optional automatic cure all call it.
package diagnose
