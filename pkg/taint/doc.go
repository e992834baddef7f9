// Package taint will own applying and removing the
// node.kubernetes.io/out-of-service taint together with its evidence
// annotations and Events, idempotent and conflict-safe.
//
// It is empty until the agent is built; see DESIGN.md §2 and §4.
package taint
