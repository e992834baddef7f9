#!/bin/sh
# The version make stamps into fenced (pkg/version) and names images,
# charts and release folders with, as a semantic version:
#   - at or after a tag, git describe's answer: v0.2.0, v0.2.0-3-g0f74214, …-dirty;
#   - without any tag, a pre-release of v0.0.0 shaped like Go's
#     pseudo-versions: v0.0.0-<commit time, UTC>-<12 hex of the commit>[-dirty]
#     ("-dirty" rather than Go's "+dirty": image tags may not hold a "+");
#   - outside a git checkout, v0.0.0-dev.
set -eu
if v=$(git describe --tags --dirty 2>/dev/null); then
	echo "$v"
	exit 0
fi
if ! commit=$(git rev-parse --short=12 HEAD 2>/dev/null); then
	echo v0.0.0-dev
	exit 0
fi
when=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)
dirty=
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	dirty=-dirty
fi
echo "v0.0.0-$when-$commit$dirty"
