#!/usr/bin/env bash
# fuzz.sh — run every Go fuzz target of the module, one after the other.
#
#   hack/fuzz.sh [-l]         -l: only list the targets ("<package dir> <FuzzName>")
#
#   FUZZTIME          how long each target runs (default 1m; go test's -fuzztime)
#   FUZZMINIMIZETIME  how long a new input may be minimized (default 5s; go's
#                     default of 60s would eat a short run, as configuration
#                     files are large inputs)
#   GO                the go command (default go)
#
# Targets are found, not listed: every `func FuzzXxx(f *testing.F)` in a
# _test.go file anywhere in the module (testdata, vendor and hidden
# directories excepted), so fuzzers added later are picked up. go test
# fuzzes one package and one target at a time, hence one run each. Every
# target runs even after a failure; the exit status is 1 if any failed.
# A failing input is written to the package's testdata/fuzz/FuzzXxx/ by go
# test: commit it with the fix, it then runs in every `go test`.
set -euo pipefail

cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-1m}
minimize=${FUZZMINIMIZETIME:-5s}
go=${GO:-go}

# "<dir> <FuzzName>" per target, sorted.
targets() {
	{ grep -rEH --include='*_test.go' --exclude-dir=testdata --exclude-dir=vendor --exclude-dir='.[!.]*' \
		'^func Fuzz[A-Za-z0-9_]*\([A-Za-z_][A-Za-z0-9_]* \*testing\.F\)' . || true; } |
		sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*$|\1 \2|' |
		sort -u
}

if [[ ${1:-} == -l ]]; then
	targets
	exit 0
fi

list=$(targets)
if [[ -z $list ]]; then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi
failed=()
while read -r dir name <&3; do
	echo "==> $dir $name (fuzztime $fuzztime)"
	if ! "$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" "$dir" </dev/null; then
		failed+=("$dir $name")
	fi
done 3<<<"$list"

if ((${#failed[@]} > 0)); then
	printf 'fuzz.sh: failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
