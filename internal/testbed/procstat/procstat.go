// Package procstat reads a process's CPU time and resident memory from
// /proc, for the benchmarks that measure fenced as a process.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100
// on every Linux architecture Go supports).
const userHZ = 100

// CPUSeconds is the user plus system CPU time of process pid so far, 0
// when it cannot be read.
func CPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which may hold spaces and ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / userHZ
}

// RSSMB is the resident set of process pid in MiB, 0 when it cannot be
// read. It counts the executable's pages the process touched, which the
// kernel shares and may drop; AnonMB is the part only the process holds.
func RSSMB(pid int) float64 { return statusMB(pid, "VmRSS:") }

// AnonMB is the anonymous resident memory of process pid in MiB (heap,
// stacks, the Go runtime's own), 0 when it cannot be read.
func AnonMB(pid int) float64 { return statusMB(pid, "RssAnon:") }

// statusMB reads a field of /proc/<pid>/status given in kB, in MiB.
func statusMB(pid int, field string) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
