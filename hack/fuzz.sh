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
# target runs even after a failure; the exit status is 1 if any failed. A
# bare "context deadline exceeded" at the end of -fuzztime with no input
# found is Go 1.26's coordinator racing its own deadline, not a finding:
# the target's corpus is then replayed as a plain test, which decides.
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
# boundaryRace: the run's output ($1) is Go 1.26's fuzz coordinator racing
# its own -fuzztime deadline (fixed in Go 1.27): a bare "context deadline
# exceeded" as the window closes, on a busy machine, with no input found.
# A real finding always says "Failing input written to"; a crash or a hang
# prints more than the bare deadline.
boundaryRace() {
	grep -q 'context deadline exceeded' "$1" &&
		! grep -qE 'Failing input written to|panic:|hung or terminated' "$1"
}

out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=()
raced=()
while read -r dir name <&3; do
	echo "==> $dir $name (fuzztime $fuzztime)"
	rc=0
	"$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" "$dir" </dev/null 2>&1 | tee "$out" || rc=${PIPESTATUS[0]}
	if ((rc == 0)); then
		continue
	fi
	# The coordinator's race is not a finding: the deterministic gate is the
	# corpus (seeds and committed failing inputs) replayed as a plain test.
	if boundaryRace "$out" && "$go" test -count=1 -run "^${name}\$" "$dir" </dev/null >/dev/null 2>&1; then
		echo "fuzz.sh: $dir $name: the fuzz coordinator's deadline race at the end of -fuzztime, no input found; its corpus replays clean"
		raced+=("$dir $name")
		continue
	fi
	failed+=("$dir $name")
done 3<<<"$list"

if ((${#raced[@]} > 0)); then
	printf 'fuzz.sh: deadline race only (corpus replayed clean): %s\n' "${raced[@]}"
fi
if ((${#failed[@]} > 0)); then
	printf 'fuzz.sh: failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
