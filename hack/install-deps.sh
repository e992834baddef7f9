#!/usr/bin/env bash
# install-deps.sh — install the Debian packages fenced's tests need, if missing.
#
#   openipmi     ipmi_sim, the simulated BMCs of the local cluster harness
#   ipmitool     cross-checks the simulated BMCs
#   etcd-server  etcd for the local control plane (internal/testbed/cluster)
#   iproute2     `ip netns` / veth / bridge for per-node network namespaces
#   systemd      systemd-analyze: test/deploy verifies deploy/systemd/fenced.service
#   dbus-daemon  the private system bus of internal/testbed/logind, each test machine's logind
#   snmpd        net-snmp's agent: the simulated APC PDUs of internal/testbed/pdusim
#   snmp         net-snmp's client tools (snmpget, snmpset), cross-checks the PDUs
#   fence-agents ClusterLabs' fence agents (fence_apc_snmp, fence_ipmilan), run by
#                pkg/fencing/device's fence-agent driver in its integration tests
#   containerd, runc, containernetworking-plugins
#                the container runtime of the real node (internal/testbed/realnode):
#                fenced's image run as pods by a real kubelet (test/realpod)
#
# With arguments, installs those packages instead (hack/vm-kernel.sh: QEMU
# for the watchdog's real-kernel test, which make test does not run).
#
# Without arguments it also raises the host's inotify instance limit
# (fs.inotify.max_user_instances) to INOTIFY_INSTANCES if it is lower: every
# kubelet of the test harness takes several instances, and the end-to-end
# scenarios run two at a time, each with up to eight kubelets, beside the
# real node's; Debian's default of 128 runs out ("inotify_init: too many open
# files"). Kubernetes nodes commonly set 8192. Without root it only says so,
# and the scenarios then run one at a time (harness.Parallel).
#
# Idempotent: packages already installed are left alone, and apt is not
# touched at all when nothing is missing. Needs root (or sudo) only when
# something has to be installed.
set -euo pipefail

INOTIFY_INSTANCES=1024
host_limits=1
PACKAGES=(openipmi ipmitool etcd-server iproute2 systemd dbus-daemon snmpd snmp fence-agents containerd runc containernetworking-plugins)
if (($# > 0)); then
	PACKAGES=("$@")
	host_limits=0
fi
readonly PACKAGES

raise_inotify_instances() {
	local f=/proc/sys/fs/inotify/max_user_instances now
	[[ -r $f ]] || return 0
	now=$(<"$f")
	if ((now >= INOTIFY_INSTANCES)); then
		echo "install-deps: fs.inotify.max_user_instances is $now (>= $INOTIFY_INSTANCES)"
	elif ((EUID == 0)) && echo "$INOTIFY_INSTANCES" >"$f" 2>/dev/null; then
		echo "install-deps: fs.inotify.max_user_instances raised from $now to $INOTIFY_INSTANCES"
	elif command -v sudo >/dev/null 2>&1 && sudo -n sysctl -q -w "fs.inotify.max_user_instances=$INOTIFY_INSTANCES" 2>/dev/null; then
		echo "install-deps: fs.inotify.max_user_instances raised from $now to $INOTIFY_INSTANCES (sudo)"
	else
		echo "install-deps: fs.inotify.max_user_instances is $now and cannot be raised here; the end-to-end scenarios will run one at a time (as root: sysctl -w fs.inotify.max_user_instances=$INOTIFY_INSTANCES)" >&2
	fi
}
if ((host_limits)); then
	raise_inotify_instances
fi

missing=()
for p in "${PACKAGES[@]}"; do
	# dpkg -s also succeeds for packages removed but not purged ("deinstall"),
	# so look at the status line, not just the exit code.
	if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		echo "install-deps: $p already installed"
	else
		missing+=("$p")
	fi
done

if ((${#missing[@]} == 0)); then
	echo "install-deps: nothing to do"
	exit 0
fi

sudo=()
if ((EUID != 0)); then
	if command -v sudo >/dev/null 2>&1; then
		sudo=(sudo)
	else
		echo "install-deps: need root to install ${missing[*]} (run as root or install sudo)" >&2
		exit 1
	fi
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deps: apt-get update"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
echo "install-deps: apt-get install -y ${missing[*]}"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"

# etcd-server's package enables a system etcd on 127.0.0.1:2379; the tests run
# their own etcd on free ports, so the system one is not needed, but it is left
# as the package set it up (stopping services is the admin's call).
for p in "${missing[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		echo "install-deps: $p still not installed after apt-get install" >&2
		exit 1
	fi
done
echo "install-deps: installed ${missing[*]}"
