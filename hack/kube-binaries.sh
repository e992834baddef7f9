#!/usr/bin/env bash
# kube-binaries.sh — build kube-apiserver, kube-controller-manager,
# kube-scheduler, kubemark, kubelet, kube-proxy and kubectl at a pinned version from the Go module
# proxy, and cache them by version outside the repository.
#
# Usage: hack/kube-binaries.sh            (KUBE_VERSION defaults to v1.37.2)
#        KUBE_VERSION=v1.35.4 hack/kube-binaries.sh
#
# Progress goes to stderr, one line per step with the elapsed seconds; the
# last line of stdout is the directory that holds the binaries, so
# callers can do BIN=$(hack/kube-binaries.sh | tail -n1).
#
# Why a throwaway module: k8s.io/kubernetes is not meant to be consumed as a
# module — its go.mod points every staging module (k8s.io/api, client-go, ...)
# at ./staging/..., which a module consumer cannot see. Replacing each of them
# with the published v0.Y.Z tag of the same release makes the graph resolvable.
# The module lives in the cache dir, never in the repo, so the project's own
# go.mod stays untouched.
#
# Environment:
#   KUBE_VERSION       release to build (vMAJOR.MINOR.PATCH[-pre]), default v1.37.2
#   FENCED_CACHE_DIR   cache root, default ${XDG_CACHE_HOME:-$HOME/.cache}/fenced
set -euo pipefail

# Upstream commands, built from k8s.io/kubernetes as they are. kubectl is
# there for test/deploy (kustomize rendering, --dry-run=server, auth can-i):
# tests must not depend on whatever kubectl a machine may or may not have.
# kubelet and kube-proxy are the real node's (internal/testbed/realnode), for
# the scenario that runs fenced as pods on a real container runtime
# (test/realpod); they share nearly all their packages with kubemark, so
# they cost little more than a link each.
readonly UPSTREAM=(kube-apiserver kube-controller-manager kube-scheduler kubemark kubelet kube-proxy kubectl)
# Our hollow kubelet (internal/testbed/hollow-kubelet: main.go and, per
# kubelet API whose signature changed, one CONCERN_v1.MINOR.go for each
# release that changed it), cached under a name that
# carries a hash of its sources (every .go file of the directory, in byte
# order), so that editing it rebuilds just that binary.
# internal/testbed/cluster computes the same name.
HOLLOW_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/internal/testbed/hollow-kubelet"
readonly HOLLOW_DIR
HOLLOW="hollow-kubelet-$(cd "$HOLLOW_DIR" && LC_ALL=C && cat ./*.go | sha256sum | cut -c1-12)"
readonly HOLLOW
readonly BINARIES=("${UPSTREAM[@]}" "$HOLLOW")

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
CACHE_ROOT="${FENCED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fenced}"

start_ns=$(date +%s%N)

# step prints one progress line with the seconds since the script started.
step() {
	local now
	now=$(date +%s%N)
	printf '[%6.1fs] %s\n' "$(((now - start_ns) / 1000000))e-3" "$*" >&2
}

die() {
	step "FAILED: $*"
	exit 1
}

if ! [[ "$KUBE_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.-]+)?$ ]]; then
	die "KUBE_VERSION=$KUBE_VERSION is not a Kubernetes release like v1.34.4"
fi
minor="${BASH_REMATCH[1]}"
# Staging modules are tagged v0.MINOR.PATCH for release v1.MINOR.PATCH.
staging_version="v0.${KUBE_VERSION#v1.}"

command -v go >/dev/null 2>&1 || die "go is not on PATH"

version_dir="$CACHE_ROOT/kube/$KUBE_VERSION"
bin_dir="$version_dir/bin"

# missing lists the binaries that are not present and executable.
missing() {
	local b
	for b in "${BINARIES[@]}"; do
		[[ -x "$bin_dir/$b" ]] || echo "$b"
	done
}

if [[ -z "$(missing)" ]]; then
	step "all ${#BINARIES[@]} binaries for $KUBE_VERSION already in $bin_dir, nothing to do"
	echo "$bin_dir"
	exit 0
fi

mkdir -p "$version_dir" || die "cannot create $version_dir"

# Serialise concurrent builds of the same version (go test ./... runs test
# packages in parallel, and each may ask for the binaries): the second caller
# waits and then finds the cache filled.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$version_dir/.lock"
	if ! flock -n 9; then
		step "another build of $KUBE_VERSION is running, waiting for its lock"
		flock 9 || die "cannot lock $version_dir/.lock"
	fi
	if [[ -z "$(missing)" ]]; then
		step "binaries for $KUBE_VERSION were built by a concurrent run, nothing to do"
		echo "$bin_dir"
		exit 0
	fi
	# Holding the lock, no other build is live: temp dirs left by a build
	# that was SIGKILLed (no chance to run its trap) can go.
	rm -rf "$version_dir"/.build.*
fi

# Build in a temp dir next to the final one (same file system) so the final
# rename is atomic: an interrupted build never leaves a half-filled bin dir.
work="$(mktemp -d "$version_dir/.build.XXXXXX")" || die "cannot create a temp dir in $version_dir"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'die "interrupted"' INT TERM

mod_dir="$work/mod"
mkdir -p "$mod_dir" "$work/bin"
cd "$mod_dir"

# A go.work above the cache dir, or GOFLAGS=-mod=vendor, must not leak into
# the throwaway module.
export GOWORK=off
export GOFLAGS="${GOFLAGS:-} -mod=mod"
# Upstream builds the control-plane binaries statically (CGO_ENABLED=0);
# doing the same keeps them independent of the host's libc and of gcc.
export CGO_ENABLED=0

step "building Kubernetes $KUBE_VERSION (staging modules $staging_version) in $work"

step "fetching k8s.io/kubernetes@$KUBE_VERSION go.mod from the module proxy"
# A placeholder go.mod first, so that the query runs in this module and not in
# whatever module may enclose the cache dir.
echo "module fenced.io/kube-binaries-build" >go.mod
upstream_mod="$(go list -m -f '{{.GoMod}}' "k8s.io/kubernetes@$KUBE_VERSION" 2>"$work/list.err")" ||
	die "cannot resolve k8s.io/kubernetes@$KUBE_VERSION: $(cat "$work/list.err")"
[[ -s "$upstream_mod" ]] || die "go.mod of k8s.io/kubernetes@$KUBE_VERSION not found at '$upstream_mod'"

# Every module the upstream go.mod points at ./staging/... needs a replace to
# the published tag; the list differs between releases, so read it, don't
# hardcode it.
mapfile -t staging < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$upstream_mod" | sort -u)
((${#staging[@]} > 0)) || die "no './staging/' replace directives found in $upstream_mod"

# Keep the upstream language version and godebug defaults: godebug applies only
# in the main module, and the binaries should behave as upstream's do.
go_line="$(awk '$1 == "go" && NF == 2 { print; exit }' "$upstream_mod")"
godebug_lines="$(awk '
	$1 == "godebug" && $2 == "(" { inblock = 1; print; next }
	inblock { print; if ($1 == ")") inblock = 0; next }
	$1 == "godebug" { print }' "$upstream_mod")"

{
	echo "// Throwaway module generated by fenced's hack/kube-binaries.sh; safe to delete."
	echo "module fenced.io/kube-binaries-build"
	echo
	echo "${go_line:-go 1.24.0}"
	[[ -n "$godebug_lines" ]] && printf '\n%s\n' "$godebug_lines"
	echo
	echo "require k8s.io/kubernetes $KUBE_VERSION"
	echo
	echo "replace ("
	for m in "${staging[@]}"; do
		printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"
	done
	echo ")"
} >go.mod

cat >tools.go <<'EOF'
//go:build tools

// Package tools pins the Kubernetes commands this module builds, so that
// go mod tidy keeps their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubemark"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
mkdir -p cmd/hollow-kubelet
# The sources carry //go:build ignore so that fenced's own module (go vet,
# go mod tidy) never sees their k8s.io/kubernetes imports; here they are a
# normal main package: main.go and, for each kubelet API whose signature
# changed (CONCERN_v1.MINOR.go: machineinfo, probes, runtime), the newest
# file not newer than this release.
srcs=("$HOLLOW_DIR/main.go")
mapfile -t concerns < <(cd "$HOLLOW_DIR" && ls ./*_v1.*.go | sed 's|^\./||; s|_v1\..*||' | sort -u)
for concern in "${concerns[@]}"; do
	picked=""
	for ((m = minor; m >= 0; m--)); do
		if [[ -f "$HOLLOW_DIR/${concern}_v1.$m.go" ]]; then
			picked="$HOLLOW_DIR/${concern}_v1.$m.go"
			break
		fi
	done
	[[ -n "$picked" ]] || die "the hollow kubelet has no ${concern}_v1.MINOR.go for v1.$minor or earlier"
	srcs+=("$picked")
done
for src in "${srcs[@]}"; do
	sed '/^\/\/go:build /d' "$src" >"cmd/hollow-kubelet/$(basename "$src")"
done
step "hollow kubelet: $(for src in "${srcs[@]}"; do basename "$src"; done | paste -sd' ')"
step "wrote throwaway module with ${#staging[@]} staging replaces"

step "go mod tidy (downloads the dependency graph on a cold module cache)"
go mod tidy >"$work/tidy.log" 2>&1 || {
	tail -n 40 "$work/tidy.log" >&2
	die "go mod tidy failed in the throwaway module (log above)"
}
step "go mod tidy done"

# Without these the binaries report v0.0.0-master+$Format:%H$, which client-go
# discovery and kubectl cannot parse. client-go/pkg/version is set as well
# because upstream's hack/lib/version.sh stamps both packages: client-go's copy
# is what the client side (kubemark's kubelet clients, user agents) reports.
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION"
	ldflags+=" -X $pkg.gitMajor=1"
	ldflags+=" -X $pkg.gitMinor=$minor"
	# The proxy does not tell the tag's commit; "archive" is the tree state
	# upstream itself uses for builds from a source archive.
	ldflags+=" -X $pkg.gitCommit=unknown"
	ldflags+=" -X $pkg.gitTreeState=archive"
	ldflags+=" -X $pkg.buildDate=$build_date"
done

# build_with_progress LOG PKG... builds PKGs into $work/bin with go build -v
# and, every 15 s, says how many packages it has compiled so far (go build
# -v names each package it compiles; cached ones are not named, so on a
# warm cache it finishes well below the total).
build_with_progress() {
	local log=$1 total pid ticks=0 done_pkgs
	shift
	total=$(go list -deps "$@" 2>/dev/null | wc -l)
	go build -v -ldflags "$ldflags" -o "$work/bin/" "$@" >"$log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 1
		if ((++ticks % 15 == 0)) && kill -0 "$pid" 2>/dev/null; then
			done_pkgs=$(grep -c -v -e '^#' -e ':' "$log" || true)
			step "  compiled $done_pkgs of at most $total packages"
		fi
	done
	wait "$pid"
}

mapfile -t todo < <(missing)
pkgs=()
for b in "${todo[@]}"; do
	[[ "$b" == "$HOLLOW" ]] || pkgs+=("k8s.io/kubernetes/cmd/$b")
done
mkdir -p "$work/bin"
if ((${#pkgs[@]} > 0)); then
	step "go build ${pkgs[*]##*/} (about 6 min cold on 2 cores, under 1 min with a warm Go build cache)"
	build_with_progress "$work/build.log" "${pkgs[@]}" || {
		tail -n 40 "$work/build.log" >&2
		die "go build failed (log above)"
	}
fi
step "go build $HOLLOW (from internal/testbed/hollow-kubelet)"
go build -ldflags "$ldflags" -o "$work/bin/$HOLLOW" ./cmd/hollow-kubelet >"$work/build-hollow.log" 2>&1 || {
	tail -n 40 "$work/build-hollow.log" >&2
	die "go build of the hollow kubelet failed (log above)"
}
for b in "${todo[@]}"; do
	[[ -x "$work/bin/$b" ]] || die "go build did not produce $b"
done
step "go build done"

# Smoke-check the stamped version before publishing the cache.
if [[ -x "$work/bin/kube-apiserver" ]]; then
	got="$("$work/bin/kube-apiserver" --version 2>&1 || true)"
	[[ "$got" == "Kubernetes $KUBE_VERSION" ]] ||
		die "kube-apiserver --version says '$got', want 'Kubernetes $KUBE_VERSION'"
fi

# One rename per binary: a reader never sees a half-written file, and the
# binaries already cached stay. Hollow kubelets of other sources are kept
# for a week (checkouts of different commits may share this cache), then
# dropped.
mkdir -p "$bin_dir"
for b in "${todo[@]}"; do
	mv -f "$work/bin/$b" "$bin_dir/$b" || die "cannot move $b to $bin_dir"
done
find "$bin_dir" -maxdepth 1 -name 'hollow-kubelet-*' ! -name "$HOLLOW" -mtime +7 -delete
step "installed ${todo[*]} into $bin_dir"
echo "$bin_dir"
