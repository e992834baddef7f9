// Package heartbeat will own the gossip ring (hashicorp/memberlist): joining
// through seeds, member metadata (node name, boot ID, role, announced
// state), encryption key and label, the member view and a clean leave.
//
// It is empty until the agent is built; see DESIGN.md §3.
package heartbeat
