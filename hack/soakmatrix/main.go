// Command soakmatrix prints the table of the repeated fault matrix of
// `make soak`: every end-to-end test, how many of the runs it passed and
// failed, its seconds, and the failed subtests. It reads the test2json
// stream that gotestsum saved with --jsonfile, and exits 1 if any run of
// any test failed.
//
// Usage: go run ./hack/soakmatrix FILE
package main

import (
	"fmt"
	"os"

	"fenced.io/fenced/internal/testbed/soak"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: soakmatrix FILE")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "soakmatrix:", err)
		os.Exit(2)
	}
	defer f.Close()
	m, err := soak.ReadMatrix(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soakmatrix:", err)
		os.Exit(2)
	}
	m.Write(os.Stdout)
	if m.Failed() || m.Runs == 0 {
		os.Exit(1)
	}
}
