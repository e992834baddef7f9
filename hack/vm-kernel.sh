#!/usr/bin/env bash
# vm-kernel.sh — what the watchdog's real-kernel test (test/vm, make
# e2e-watchdog-vm) needs: QEMU and cpio from Debian's packages (installed if
# missing), and Debian's current amd64 kernel — its vmlinuz and the modules
# of the watchdog core and the i6300ESB driver, QEMU's emulated watchdog —
# taken from Debian's linux-image package and cached by version outside the
# repository.
#
# The last line of stdout is the directory that holds vmlinuz, watchdog.ko
# and i6300esb.ko, so callers can do DIR=$(hack/vm-kernel.sh | tail -n1).
#
# Environment:
#   FENCED_CACHE_DIR   cache root, default ${XDG_CACHE_HOME:-$HOME/.cache}/fenced
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/hack/install-deps.sh" qemu-system-x86 cpio >&2

# The kernel package linux-image-amd64 points at today, e.g.
# linux-image-6.1.0-56-amd64.
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [[ -z "$pkg" ]]; then
	echo "vm-kernel: apt-cache names no kernel package for linux-image-amd64 (apt-get update?)" >&2
	exit 1
fi
release=${pkg#linux-image-}
cache="${FENCED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fenced}/vm/$release"
if [[ -s "$cache/vmlinuz" && -s "$cache/watchdog.ko" && -s "$cache/i6300esb.ko" ]]; then
	echo "vm-kernel: $release cached" >&2
	echo "$cache"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "vm-kernel: downloading $pkg" >&2
(cd "$work" && apt-get download "$pkg" >&2)
deb=$(ls "$work"/*.deb)
mods="./lib/modules/$release/kernel/drivers/watchdog"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" "./boot/vmlinuz-$release" "$mods/watchdog.ko" "$mods/i6300esb.ko"
mkdir -p "$cache"
cp "$work/boot/vmlinuz-$release" "$cache/vmlinuz"
cp "$work/$mods/watchdog.ko" "$work/$mods/i6300esb.ko" "$cache/"
echo "vm-kernel: $release in $cache" >&2
echo "$cache"
