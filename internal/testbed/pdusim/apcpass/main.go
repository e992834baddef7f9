// Command apcpass is the firmware of the test bed's simulated PDU: a
// net-snmp pass_persist handler that serves the outlet objects of APC's
// PowerNet MIB (rPDUOutletControlTable, rPDUOutletStatusTable) from the
// state file named by its only argument, and switches outlets when an
// SNMP SET writes rPDUOutletControlOutletCommand. snmpd does everything
// else (transport, communities, USM, access control), so what a fence
// agent talks to is a real SNMP agent.
//
// Protocol (snmpd.conf(5), pass_persist): "PING" → "PONG"; "get"/"getnext"
// and an OID → OID, type and value on three lines, or "NONE"; "set", an
// OID and "TYPE VALUE" → "DONE" or an error word.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"

	"fenced.io/fenced/internal/testbed/pdusim"
)

// The PowerNet-MIB objects fence_apc_snmp uses for an "APC rPDU"
// (sysObjectID .1.3.6.1.4.1.318.1.3.4.5), all under rPDUOutlet.
const (
	rPDUOutlet = ".1.3.6.1.4.1.318.1.1.12.3"
	// rPDUOutletDevNumCntrlOutlets.0: how many outlets.
	numOutlets = rPDUOutlet + ".1.4.0"
	// rPDUOutletControlTable columns: index, name, command (1 immediateOn,
	// 2 immediateOff; it reads as the outlet's state).
	controlIndex   = rPDUOutlet + ".3.1.1.1"
	controlName    = rPDUOutlet + ".3.1.1.2"
	controlCommand = rPDUOutlet + ".3.1.1.4"
	// rPDUOutletStatusTable columns: index, name, state (1 on, 2 off).
	statusIndex = rPDUOutlet + ".5.1.1.1"
	statusName  = rPDUOutlet + ".5.1.1.2"
	statusState = rPDUOutlet + ".5.1.1.4"
)

// The values of rPDUOutletStatusOutletState and of the command column.
const (
	stateOn  = 1
	stateOff = 2
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: apcpass STATEFILE")
		os.Exit(2)
	}
	// snmpd keeps stderr; errors go there and into its log.
	log.SetPrefix("apcpass: ")
	if err := serve(os.Stdin, os.Stdout, os.Args[1]); err != nil {
		log.Fatal(err)
	}
}

func serve(in io.Reader, out io.Writer, statePath string) error {
	r := bufio.NewReader(in)
	w := bufio.NewWriter(out)
	readLine := func() (string, error) {
		s, err := r.ReadString('\n')
		if err != nil && (s == "" || !errors.Is(err, io.EOF)) {
			return "", err
		}
		return strings.TrimSpace(s), nil
	}
	for {
		cmd, err := readLine()
		if errors.Is(err, io.EOF) {
			return nil // snmpd closed the pipe: it is shutting down
		}
		if err != nil {
			return err
		}
		var reply []string
		switch cmd {
		case "PING":
			reply = []string{"PONG"}
		case "get", "getnext":
			oid, err := readLine()
			if err != nil {
				return err
			}
			reply = lookup(statePath, cmd == "getnext", oid)
		case "set":
			oid, err := readLine()
			if err != nil {
				return err
			}
			typeValue, err := readLine()
			if err != nil {
				return err
			}
			reply = []string{set(statePath, oid, typeValue)}
		case "":
			continue
		default:
			log.Printf("unknown command %q", cmd)
			reply = []string{"NONE"}
		}
		for _, l := range reply {
			fmt.Fprintln(w, l)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
}

// varbind is one object instance of the served tree.
type varbind struct {
	oid   []int
	typ   string // pass_persist type word: integer, string
	value string
}

// tree lists the served instances in lexicographic OID order, as GETNEXT
// walks them.
func tree(outlets []pdusim.OutletState) []varbind {
	var vbs []varbind
	add := func(column string, index int, typ, value string) {
		oid := mustParse(column)
		if index > 0 {
			oid = append(oid, index)
		}
		vbs = append(vbs, varbind{oid: oid, typ: typ, value: value})
	}
	add(numOutlets, 0, "integer", strconv.Itoa(len(outlets)))
	columns := []struct {
		column string
		typ    string
		value  func(i int, o pdusim.OutletState) string
	}{
		{controlIndex, "integer", func(i int, _ pdusim.OutletState) string { return strconv.Itoa(i) }},
		{controlName, "string", func(_ int, o pdusim.OutletState) string { return o.Name }},
		{controlCommand, "integer", stateValue},
		{statusIndex, "integer", func(i int, _ pdusim.OutletState) string { return strconv.Itoa(i) }},
		{statusName, "string", func(_ int, o pdusim.OutletState) string { return o.Name }},
		{statusState, "integer", stateValue},
	}
	for _, c := range columns {
		for i, o := range outlets {
			add(c.column, i+1, c.typ, c.value(i+1, o))
		}
	}
	slices.SortFunc(vbs, func(a, b varbind) int { return slices.Compare(a.oid, b.oid) })
	return vbs
}

func stateValue(_ int, o pdusim.OutletState) string {
	if o.On {
		return strconv.Itoa(stateOn)
	}
	return strconv.Itoa(stateOff)
}

func lookup(statePath string, next bool, oidText string) []string {
	oid, err := parseOID(oidText)
	if err != nil {
		log.Printf("get %q: %v", oidText, err)
		return []string{"NONE"}
	}
	outlets, err := pdusim.ReadState(statePath)
	if err != nil {
		log.Printf("reading state: %v", err)
		return []string{"NONE"}
	}
	for _, vb := range tree(outlets) {
		c := slices.Compare(vb.oid, oid)
		if (!next && c == 0) || (next && c > 0) {
			return []string{formatOID(vb.oid), vb.typ, vb.value}
		}
	}
	return []string{"NONE"}
}

// set switches an outlet: only rPDUOutletControlOutletCommand.N is
// writable, with immediateOn (1) or immediateOff (2). Reboot and the
// delayed commands are refused (wrong-value): fence agents switch off
// and on themselves, and an instant reboot would be invisible to
// watchers of the state file.
func set(statePath, oidText, typeValue string) string {
	oid, err := parseOID(oidText)
	if err != nil {
		return "not-writable"
	}
	column := mustParse(controlCommand)
	if len(oid) != len(column)+1 || !slices.Equal(oid[:len(column)], column) {
		return "not-writable"
	}
	typ, value, _ := strings.Cut(typeValue, " ")
	if typ != "integer" {
		return "wrong-type"
	}
	cmd, err := strconv.Atoi(strings.TrimSpace(value))
	if err != nil || (cmd != stateOn && cmd != stateOff) {
		return "wrong-value"
	}
	index := oid[len(oid)-1]
	result := "DONE"
	err = pdusim.UpdateState(statePath, func(outlets []pdusim.OutletState) error {
		if index < 1 || index > len(outlets) {
			result = "not-writable"
			return nil
		}
		outlets[index-1].On = cmd == stateOn
		return nil
	})
	if err != nil {
		log.Printf("set %s: %v", oidText, err)
		return "inconsistent-value"
	}
	return result
}

func parseOID(s string) ([]int, error) {
	s = strings.TrimPrefix(s, ".")
	if s == "" {
		return nil, errors.New("empty OID")
	}
	parts := strings.Split(s, ".")
	oid := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad OID %q", s)
		}
		oid[i] = n
	}
	return oid, nil
}

func mustParse(s string) []int {
	oid, err := parseOID(s)
	if err != nil {
		panic(err)
	}
	return oid
}

func formatOID(oid []int) string {
	var b strings.Builder
	for _, n := range oid {
		b.WriteByte('.')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}
