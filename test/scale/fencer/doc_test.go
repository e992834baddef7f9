// Package fencer_test measures one fencer in a 1000-Node cluster and a
// rack of 40 going dark: `make bench-scale` runs it at
// full size (FENCED_BENCH_SCALE=1); ordinary `go test` runs the same code
// at 20 Nodes and racks of 3, so that it cannot rot and its correctness
// checks run in CI.
//
// What is real: kube-apiserver, etcd and the controller manager
// (internal/testbed/cluster); the fenced binary, run as `fenced agent` in
// its own process with a fencer configuration, so that its RSS and CPU are
// its own; one ipmi_sim per rack node; an SNMP PDU read by ClusterLabs'
// fence_apc_snmp for the second rack; the gossip members of the racks and
// of some other nodes, each a real pkg/heartbeat ring member on its own
// loopback address. What is simulated, lightly, in the test process: the
// kubelets — one renewal of each node's Lease every 10 s and a Node
// status heartbeat every 5 min, the kubelet's own cadences when nothing
// changes — and the gossip members of the nodes outside the racks beyond
// those few, which do not exist at all (see membersFor).
package fencer_test
