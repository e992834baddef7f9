// Package pdusim runs a switched rack PDU for tests: Debian's net-snmp
// snmpd, answering SNMP v1/v2c (and optionally v3) on a loopback or
// test-namespace address, with a pass_persist handler (./apcpass, built
// by Start) that serves the APC PowerNet-MIB outlet objects ClusterLabs'
// fence_apc_snmp reads and writes: sysObjectID says "APC rPDU", and
// rPDUOutletStatusTable / rPDUOutletControlTable hold each outlet's name
// and state, switched by writing rPDUOutletControlOutletCommand.
//
// Nothing in the path from a fence agent to an outlet is fake: the agent
// runs snmpget/snmpset against a real SNMP agent, which checks the
// community or the v3 user (a wrong one gets no answer, or an
// authentication failure report), and only the outlet table behind it is
// the test bed's. That table is a state file (state.go) that the Go side
// reads and changes too: [PDU.Outlet], [PDU.SetOutlet], and
// [PDU.OnChange] callbacks for every change, so a harness can cut a
// machine's power (and its BMC's) when its outlets go off.
package pdusim
