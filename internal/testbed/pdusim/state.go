package pdusim

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// OutletState is one outlet as the state file holds it.
type OutletState struct {
	// Name is the outlet's name (rPDUOutletStatusOutletName), what
	// fence_apc_snmp's list prints and what a plug may be given as.
	Name string
	// On is true while the outlet feeds power.
	On bool
}

// The state file is the PDU's outlet table, shared by the Go side (PDU)
// and the pass_persist handler that snmpd runs (apcpass): one line per
// outlet, in outlet order, "on NAME" or "off NAME". Both sides read it
// fresh for every request and change it only under an flock of
// lockSuffix beside it, replacing it by rename, so a reader never sees a
// half-written table and no read-modify-write loses another's change.
const lockSuffix = ".lock"

// ReadState reads the outlet table at path.
func ReadState(path string) ([]OutletState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseState(b)
}

func parseState(b []byte) ([]OutletState, error) {
	var outlets []OutletState
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		state, name, _ := strings.Cut(sc.Text(), " ")
		switch state {
		case "on", "off":
		default:
			return nil, fmt.Errorf("state file line %d: state %q is neither on nor off", line, state)
		}
		outlets = append(outlets, OutletState{Name: name, On: state == "on"})
	}
	return outlets, sc.Err()
}

// UpdateState changes the outlet table at path under its lock: fn gets
// the current table and changes it in place.
func UpdateState(path string, fn func([]OutletState) error) error {
	lock, err := os.OpenFile(path+lockSuffix, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	// Closing the file releases the lock.
	outlets, err := ReadState(path)
	if err != nil {
		return err
	}
	if err := fn(outlets); err != nil {
		return err
	}
	return writeState(path, outlets)
}

// writeState replaces the file at path by rename.
func writeState(path string, outlets []OutletState) error {
	var b bytes.Buffer
	for _, o := range outlets {
		state := "off"
		if o.On {
			state = "on"
		}
		fmt.Fprintf(&b, "%s %s\n", state, o.Name)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".outlets-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
