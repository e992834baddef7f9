// Package device talks to the machines' out-of-band controllers: it is
// where the decision core's actions reach hardware.
//
// A [BMC] reads and switches a chassis' power and reports its system GUID;
// a reading of off is only ever an authenticated answer, never a timeout
// or a refusal. Drivers: [IPMI] (ipmi.go, IPMI v2.0 lanplus via
// bougou/go-ipmi) and [Redfish] (redfish.go, via stmcginnis/gofish). A new
// kind of device is one more driver implementing [BMC] beside them, built
// by [NewDriver] from its configuration entry.
//
// [FenceAgent] (fenceagent.go) runs any ClusterLabs fence agent
// (fence_apc_snmp, fence_ipmilan, …) through its stdin interface: one
// device, such as a PDU, serving many plugs; [FenceAgent.Plug] is one plug
// seen as a [BMC]. The configuration declares them (fenceDevices) and
// orders them with the BMCs in each node's fencing topology.
//
// Around the drivers: [Inventory] maps node names to their drivers and
// their fencing levels (inventory.go; [Inventory.Levels], levels.go: each
// level's [Plug]s, run in parallel by [OnLevel]); [PowerOffVerified],
// [PowerOnVerified] and [PowerCycleVerified] switch and then wait until the
// BMC reads the wanted state (power.go); every failure is an [*Error]
// classified by a vocab.ErrorKind (bmc.go, classify.go) and stripped of
// credentials (redact.go).
//
// The fencer loop (pkg/fencing) calls this package for the decision core's
// ActReadPower, ActPowerOff and ActPowerOn; the on-call commands (`fenced
// bmc`, `fenced device`, `fenced topology check`, `fenced confirm`) use it
// through pkg/admin. It never decides anything.
package device
