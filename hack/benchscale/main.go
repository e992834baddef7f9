// Command benchscale tables the figures of several runs of make
// bench-scale (the JSON files FENCED_BENCH_SCALE_FIGURES names): each
// figure's median, lowest and highest. make bench-scale-medians runs it.
//
// Usage: go run ./hack/benchscale FILE...
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"fenced.io/fenced/internal/testbed/soak"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchscale FILE...")
		os.Exit(2)
	}
	var runs []soak.ScaleFigures
	for _, path := range os.Args[1:] {
		b, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchscale:", err)
			os.Exit(2)
		}
		var f soak.ScaleFigures
		if err := json.Unmarshal(b, &f); err != nil {
			fmt.Fprintf(os.Stderr, "benchscale: %s: %v\n", path, err)
			os.Exit(2)
		}
		runs = append(runs, f)
	}
	fmt.Print(soak.ScaleMedians(runs))
}
