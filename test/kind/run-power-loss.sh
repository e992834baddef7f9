#!/usr/bin/env bash
# run-power-loss.sh — fenced on a kind cluster: pull a worker's plug, watch
# fenced taint it out-of-service on its BMC's evidence and the StatefulSet's
# pod start on another worker; then switch the worker on again.
#
# For machines with Docker; the project's own CI has no Docker engine and
# runs the same scenario on the local harness instead (test/e2e). See
# README.md.
#
# Needs: docker (BuildKit), kind, kubectl, ipmi_sim (Debian: openipmi),
# ipmitool. Run from anywhere:
#
#   test/kind/run-power-loss.sh
#
# Environment:
#   KIND_CLUSTER     cluster name (default fenced-kind); must not exist yet
#   KIND_NODE_IMAGE  kindest/node image (default: kind's own)
#   KEEP_CLUSTER=1   keep the cluster at the end (default: delete it)
#   BMC_PORT_BASE    first BMC's UDP port is this + 1 (default 6230)
#   TIMEOUT          seconds each wait may take (default 300)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
readonly here repo

cluster="${KIND_CLUSTER:-fenced-kind}"
timeout="${TIMEOUT:-300}"
port_base="${BMC_PORT_BASE:-6230}"
readonly ns=fenced-system
readonly image=fenced:kind
# kind-config.yaml mounts this host directory into every worker.
readonly shared=/tmp/fenced-kind-shared
readonly taint='node.kubernetes.io/out-of-service=nodeshutdown:NoExecute'
readonly fencer_label=node-restriction.kubernetes.io/fenced-fencer
readonly bmc_user=fenced
bmc_password="$(head -c 12 /dev/urandom | base64 | tr -d '/+=')"
readonly bmc_password
work="$(mktemp -d "${TMPDIR:-/tmp}/fenced-kind.XXXXXX")"
readonly work

declare -A bmc_port=()  # worker -> UDP port of its BMC
bmc_pgids=()            # process groups of the ipmi_sims (and their machines)
gateway=""

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "FAILED: $*"
	exit 1
}
kc() { kubectl --context "kind-$cluster" "$@"; }

# wait_for DESCRIPTION COMMAND...: runs COMMAND every 2 s until it succeeds,
# for at most $timeout seconds.
wait_for() {
	local what="$1" deadline=$((SECONDS + timeout))
	shift
	log "waiting for $what"
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "timed out after ${timeout}s waiting for $what"
		sleep 2
	done
}

cleanup() {
	local pg
	# SIGKILL, not SIGTERM: a machine script that sees SIGTERM powers its
	# worker off (docker kill), and nothing here should touch the workers.
	for pg in "${bmc_pgids[@]}"; do
		kill -KILL -- "-$pg" 2>/dev/null || true
	done
	if [[ "${KEEP_CLUSTER:-0}" == 1 ]]; then
		log "kept cluster $cluster (kind delete cluster --name $cluster); its BMCs stopped with this script"
	else
		kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}

# ipmi BMC ARGS...: ipmitool against the simulated BMC of worker BMC.
ipmi() {
	local node="$1"
	shift
	ipmitool -I lanplus -C 3 -H "$gateway" -p "${bmc_port[$node]}" -U "$bmc_user" -P "$bmc_password" "$@"
}

power_is() { ipmi "$1" chassis power status | grep -q "is $2\$"; }

has_taint() {
	kc get node "$1" -o jsonpath='{range .spec.taints[*]}{.key}={.value}:{.effect}{"\n"}{end}' | grep -qx "$taint"
}

node_ready() {
	[[ "$(kc get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

# web_elsewhere NODE: web-0 is Ready on a node other than NODE.
web_elsewhere() {
	local on ready
	on="$(kc get pod web-0 -o jsonpath='{.spec.nodeName}')"
	ready="$(kc get pod web-0 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')"
	[[ -n "$on" && "$on" != "$1" && "$ready" == True ]]
}

# smbios_guid UUID: the bytes a BMC reports as System GUID for a machine
# whose SMBIOS (and so the kubelet's systemUUID) says UUID — the first
# three fields little-endian (same as internal/testbed/ipmisim). fenced checks that the
# BMC it reads belongs to the Node it is about to taint.
smbios_guid() {
	local h="${1//-/}"
	h="${h,,}"
	echo "${h:6:2}${h:4:2}${h:2:2}${h:0:2}${h:10:2}${h:8:2}${h:14:2}${h:12:2}${h:16:16}"
}

# start_bmc NODE PORT: one ipmi_sim on the Docker network's gateway, whose
# chassis is NODE's container (bmc-machine.sh).
start_bmc() {
	local node="$1" port="$2" dir="$work/bmc-$1" uuid pid
	mkdir -p "$dir/state"
	uuid="$(kc get node "$node" -o jsonpath='{.status.nodeInfo.systemUUID}')"
	printf '#!/usr/bin/env bash\nexec %q %q\n' "$here/bmc-machine.sh" "$node" >"$dir/machine.sh"
	chmod +x "$dir/machine.sh"
	# The same lan.conf as internal/testbed/ipmisim: chassis control needs the system
	# interface (serial channel 15, nothing connects), which makes power off
	# signal the startcmd at once.
	cat >"$dir/lan.conf" <<-EOF
		name "$node"
		set_working_mc 0x20
		  startlan 1
		    addr $gateway $port
		    priv_limit admin
		    allowed_auths_callback none md2 md5 straight
		    allowed_auths_user none md2 md5 straight
		    allowed_auths_operator none md2 md5 straight
		    allowed_auths_admin none md2 md5 straight
		    guid $(smbios_guid "$uuid")
		  endlan
		  serial 15 127.0.0.1 $((port + 1000)) codec VM
		  poweroff_wait 0
		  kill_wait 1
		  startcmd "$dir/machine.sh"
		  startnow true
		  user 2 true "$bmc_user" "$bmc_password" admin 10 none md2 md5 straight
	EOF
	printf 'mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\nmc_enable 0x20\n' >"$dir/sim.emu"
	# Its own session (process group), so cleanup can take it down with
	# its machine script in one signal.
	setsid ipmi_sim -n -c "$dir/lan.conf" -f "$dir/sim.emu" -s "$dir/state" >"$dir/ipmi_sim.log" 2>&1 &
	pid=$!
	bmc_pgids+=("$pid")
	bmc_port[$node]="$port"
	wait_for "the BMC of $node ($gateway:$port) to read power on" power_is "$node" on
}

# --- 0. prerequisites -------------------------------------------------------
for c in docker kind kubectl ipmi_sim ipmitool setsid; do
	command -v "$c" >/dev/null 2>&1 || die "$c not found (ipmi_sim: apt-get install openipmi; ipmitool: apt-get install ipmitool)"
done
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
	die "kind cluster $cluster exists already: kind delete cluster --name $cluster"
fi
trap cleanup EXIT
trap 'die interrupted' INT TERM

# --- 1. cluster: 1 control plane, 3 workers ---------------------------------
log "1. creating kind cluster $cluster"
mkdir -p "$shared"
kind create cluster --name "$cluster" --config "$here/kind-config.yaml" \
	${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 180s
control_plane="$(kc get nodes -l node-role.kubernetes.io/control-plane -o jsonpath='{.items[0].metadata.name}')"
mapfile -t workers < <(kc get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
((${#workers[@]} == 3)) || die "want 3 workers, kind made ${#workers[@]}"

# --- 2. image ---------------------------------------------------------------
log "2. building $image (make image) and loading it into the nodes"
make -C "$repo" --no-print-directory image IMAGE_TAG="$image" IMAGE_ARCHIVE="$repo/bin/fenced-kind.tar"
kind load image-archive "$repo/bin/fenced-kind.tar" --name "$cluster"

# --- 3. one simulated BMC per worker ----------------------------------------
# On the host, at the gateway of kind's Docker network: the fencer (on the
# control-plane node) reaches it there, as it would reach a BMC network.
gateway="$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}' | tr ' ' '\n' | grep -m1 -F .)" ||
	die "no IPv4 gateway on Docker network kind"
log "3. starting one ipmi_sim per worker on $gateway"
i=0
for w in "${workers[@]}"; do
	i=$((i + 1))
	# kind restarts its node containers after a crash; a worker whose plug
	# was pulled must stay off until its BMC switches it on.
	docker update --restart=no "$w" >/dev/null
	start_bmc "$w" $((port_base + i))
done

# --- 4. fenced: observers everywhere, the fencer on the control plane -------
log "4. deploying fenced (test/kind/overlay), fencer on $control_plane"
kc label node "$control_plane" "$fencer_label=true" --overwrite
kc apply -f - <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
EOF
kc -n "$ns" create secret generic fenced-gossip-key \
	--from-literal=key="$(head -c 32 /dev/urandom | base64)"
kc -n "$ns" create secret generic fenced-bmc --from-literal=password="$bmc_password"
{
	cat <<-EOF
		apiVersion: fenced.io/v1alpha1
		kind: FencedConfiguration
		clusterName: kind
		gossip:
		  port: 8946
		  keyDir: /etc/fenced/gossip
		policy:
		  mode: confirm-only
		bmc:
		  defaults:
		    protocol: ipmi
		    username: $bmc_user
		    passwordFile: /etc/fenced/bmc/password
		    address: $gateway
		  nodes:
	EOF
	for w in "${workers[@]}"; do
		printf '    - name: %s\n      port: %s\n' "$w" "${bmc_port[$w]}"
	done
} >"$work/fencer-config.yaml"
kc -n "$ns" create configmap fenced-fencer-config --from-file=config.yaml="$work/fencer-config.yaml"
kc apply -k "$here/overlay"
kc -n "$ns" rollout status ds/fenced-observer --timeout "${timeout}s"
kc -n "$ns" rollout status ds/fenced-fencer --timeout "${timeout}s"

# --- 5. a StatefulSet with a volume on a worker -----------------------------
log "5. starting the StatefulSet web (test/kind/workload.yaml)"
kc apply -f "$here/workload.yaml"
wait_for "web-0 to be Ready" kc wait pod/web-0 --for=condition=Ready --timeout=5s
victim="$(kc get pod web-0 -o jsonpath='{.spec.nodeName}')"
log "web-0 runs on $victim"

# --- 6. pull the plug -------------------------------------------------------
log "6. pulling the plug of $victim (docker kill)"
start=$SECONDS
docker kill "$victim" >/dev/null
wait_for "the BMC of $victim to read power off" power_is "$victim" off

# --- 7. fenced taints the node, with the BMC's reading as evidence ---------
wait_for "the out-of-service taint on $victim" has_taint "$victim"
log "tainted $((SECONDS - start))s after the power loss; evidence:"
kc get node "$victim" -o jsonpath='{.metadata.annotations.fenced\.io/evidence}{"\n"}'

# --- 8. the pod runs elsewhere ------------------------------------------------
wait_for "web-0 to be Ready on another node" web_elsewhere "$victim"
log "web-0 Ready on $(kc get pod web-0 -o jsonpath='{.spec.nodeName}'), $((SECONDS - start))s after the power loss; its log:"
kc exec web-0 -- tail -n 5 /data/log

# --- 9. power back on ---------------------------------------------------------
# A kind node is a container on the host's kernel: it comes back with the
# same boot ID it had, which on real hardware means "it was never off".
# fenced therefore keeps the taint and raises its safety alarm
# (FencedNodeBackWithSameBootID) — the right answer to what it sees. Lift
# the taint by hand here: kubectl taint node NODE node.kubernetes.io/out-of-service-
log "9. switching $victim on again through its BMC"
ipmi "$victim" chassis power on >/dev/null
wait_for "$victim to be Ready" node_ready "$victim"
log "fenced's Events about $victim:"
kc get events -n default --field-selector "involvedObject.name=$victim" \
	-o custom-columns=TIME:.lastTimestamp,TYPE:.type,REASON:.reason,MESSAGE:.message
log "done: power loss -> taint -> web-0 moved, in $((SECONDS - start))s"
