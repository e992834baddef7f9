{{/*
Labels on every object: the name the kustomize base uses, and Helm's own.
*/}}
{{- define "fenced.labels" -}}
app.kubernetes.io/name: fenced
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "fenced.tag" . | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end }}

{{- define "fenced.tag" -}}
{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
An image reference: repository (with global.imageRegistry in place of its
registry, when set) and tag (the appVersion when empty). Arguments: root,
repository, tag.
*/}}
{{- define "fenced.image" -}}
{{- $repo := .repository -}}
{{- $registry := ((.root.Values.global).imageRegistry) | default "" -}}
{{- if $registry -}}
{{- $parts := splitList "/" $repo -}}
{{- if and (gt (len $parts) 1) (regexMatch "[.:]|^localhost$" (first $parts)) -}}
{{- $repo = join "/" (rest $parts) -}}
{{- end -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" $registry) $repo -}}
{{- end -}}
{{- printf "%s:%s" $repo (.tag | default .root.Chart.AppVersion) -}}
{{- end }}

{{/*
The pull Secrets: global.imagePullSecrets and imagePullSecrets, each a name
or {name: ...}, deduplicated in order.
*/}}
{{- define "fenced.imagePullSecrets" -}}
{{- $names := list -}}
{{- range (concat (((.Values.global).imagePullSecrets) | default list) (.Values.imagePullSecrets | default list)) -}}
{{- $name := . -}}
{{- if kindIs "map" . }}{{ $name = .name }}{{ end -}}
{{- if not (has $name $names) }}{{ $names = append $names $name }}{{ end -}}
{{- end -}}
{{- range $names }}
- name: {{ . }}
{{- end }}
{{- end }}

{{/*
The ports the components of a bare-metal cluster own on the nodes' host
network (docs/install.md, "Ports", says where each comes from). The agents
gossip and serve metrics on the host network: a port here would keep one
of the two from running on a shared node.
*/}}
{{- define "fenced.knownPorts" -}}
- {from: 179, to: 179, owner: "BGP (Calico, MetalLB in BGP mode, kube-router)"}
- {from: 2112, to: 2112, owner: "kube-vip's metrics"}
- {from: 2377, to: 2377, owner: "Docker Swarm's cluster management"}
- {from: 2379, to: 2381, owner: "etcd"}
- {from: 3300, to: 3300, owner: "the Ceph monitors (msgr2)"}
- {from: 4240, to: 4240, owner: "Cilium's health checks"}
- {from: 4244, to: 4244, owner: "Cilium's Hubble server"}
- {from: 4250, to: 4250, owner: "Cilium's mutual authentication"}
- {from: 4789, to: 4789, owner: "VXLAN (Calico, Docker Swarm's overlay)"}
- {from: 5473, to: 5473, owner: "Calico's Typha"}
- {from: 6081, to: 6081, owner: "Geneve (Cilium)"}
- {from: 6443, to: 6443, owner: "the Kubernetes API server"}
- {from: 6783, to: 6784, owner: "Weave Net"}
- {from: 6789, to: 6789, owner: "the Ceph monitors (msgr1)"}
- {from: 6800, to: 7300, owner: "the Ceph OSDs, MDSs and managers"}
- {from: 7000, to: 7999, owner: "DRBD resources (LINSTOR, Piraeus)"}
- {from: 7472, to: 7473, owner: "MetalLB's metrics"}
- {from: 7480, to: 7480, owner: "the Ceph object gateway"}
- {from: 7946, to: 7946, owner: "MetalLB's speakers and Docker Swarm (memberlist gossip)"}
- {from: 8285, to: 8285, owner: "flannel's UDP backend"}
- {from: 8300, to: 8302, owner: "Consul (server RPC, Serf LAN and WAN)"}
- {from: 8472, to: 8472, owner: "VXLAN (flannel, Cilium)"}
- {from: 8500, to: 8503, owner: "Consul's HTTP and gRPC APIs"}
- {from: 8600, to: 8600, owner: "Consul's DNS"}
- {from: 9100, to: 9100, owner: "the Prometheus node exporter"}
- {from: 9500, to: 9503, owner: "Longhorn's manager and webhooks"}
- {from: 9962, to: 9965, owner: "Cilium's metrics"}
- {from: 10248, to: 10260, owner: "the kubelet, kube-proxy, the controller manager and the scheduler"}
- {from: 30000, to: 32767, owner: "Kubernetes NodePort Services"}
- {from: 51820, to: 51821, owner: "WireGuard (Calico)"}
- {from: 51871, to: 51871, owner: "WireGuard (Cilium)"}
{{- end }}

{{/*
Fails when a port is one a known component owns. Arguments: root, value
(the values key, for the message), port, exporters (true: the Prometheus
exporters' range 9100-9999 counts as owned too — for the gossip port, not
for the metrics port, which is an exporter's).
*/}}
{{- define "fenced.checkPort" -}}
{{- $port := int .port -}}
{{- $known := include "fenced.knownPorts" .root | fromYamlArray -}}
{{- if .exporters -}}
{{- $known = append $known (dict "from" 9100 "to" 9999 "owner" "the Prometheus exporters (each its own port in 9100-9999)") -}}
{{- end -}}
{{- $owner := "" -}}
{{- $width := 65536 -}}
{{- range $known -}}
{{- if and (ge $port (int .from)) (le $port (int .to)) (lt (sub (int .to) (int .from)) $width) -}}
{{- /* The narrowest range names the component best. */ -}}
{{- $owner = .owner -}}
{{- $width = sub (int .to) (int .from) -}}
{{- end -}}
{{- end -}}
{{- range (.root.Values.allowKnownPorts | default list) -}}
{{- if eq (int .) $port }}{{ $owner = "" }}{{ end -}}
{{- end -}}
{{- if $owner -}}
{{- fail (printf "%s: %d is taken on the nodes' host network by %s; pick a port no component of your nodes uses, or list it in allowKnownPorts if none of them runs on your nodes (docs/install.md, \"Ports\")" .value $port $owner) -}}
{{- end -}}
{{- end }}

{{/*
What every agent's configuration holds, observer or fencer: the cluster
section of the values. One place, so that both DaemonSets form one ring.
*/}}
{{- define "fenced.clusterConfig" -}}
{{- $v := .Values.cluster -}}
{{- include "fenced.checkPort" (dict "root" . "value" "cluster.gossip.port" "port" $v.gossip.port "exporters" true) -}}
{{- include "fenced.checkPort" (dict "root" . "value" "metrics.port" "port" .Values.metrics.port "exporters" false) -}}
{{- if eq (int $v.gossip.port) (int .Values.metrics.port) -}}
{{- fail (printf "cluster.gossip.port and metrics.port are both %d" (int $v.gossip.port)) -}}
{{- end -}}
{{- $c := dict "apiVersion" "fenced.io/v1alpha1" "kind" "FencedConfiguration" -}}
{{- with $v.name }}{{ $_ := set $c "clusterName" . }}{{ end -}}
{{- $g := deepCopy $v.gossip -}}
{{- /* The Secret cluster.gossipKeySecret, mounted whole: its key "key"
encrypts, any other key only decrypts (a rotation). */ -}}
{{- $_ := set $g "keyDir" "/etc/fenced/gossip" -}}
{{- $_ := set $c "gossip" $g -}}
{{- with $v.shutdown }}{{ $_ := set $c "shutdown" (deepCopy .) }}{{ end -}}
{{- /* Every agent publishes its key Lease in the lease namespace, which the
agent identity policy covers; fencers take their power Leases there. */ -}}
{{- $_ := set $c "fencer" (dict "leaseNamespace" .Release.Namespace) -}}
{{- toYaml $c -}}
{{- end }}

{{/*
The fencers' configuration: the cluster's, plus the inventory and policy.
*/}}
{{- define "fenced.fencerConfig" -}}
{{- $f := .Values.fencers -}}
{{- if not (or ($f.bmc).nodes $f.fenceDevices (and .Values.watchdog.enabled $f.topology)) -}}
{{- fail "fencers.enabled needs an inventory: fencers.bmc.nodes (and bmc.defaults), fencers.fenceDevices with fencers.topology, or watchdog.enabled with fencers.topology; see README.md, \"Install\"" -}}
{{- end -}}
{{- $c := include "fenced.clusterConfig" . | fromYaml -}}
{{- with $f.policy }}{{ $_ := set $c "policy" (deepCopy .) }}{{ end -}}
{{- $_ := set $c "fencer" (merge (dict "leaseNamespace" .Release.Namespace) (deepCopy ($f.fencer | default dict))) -}}
{{- with $f.bmc }}{{ $_ := set $c "bmc" (deepCopy .) }}{{ end -}}
{{- with $f.fenceDevices }}{{ $_ := set $c "fenceDevices" (deepCopy .) }}{{ end -}}
{{- with $f.topology }}{{ $_ := set $c "topology" (deepCopy .) }}{{ end -}}
{{- /* The fencers read orderAfter and allowSoftware here, and a topology
with the watchdog level needs the section. */ -}}
{{- if .Values.watchdog.enabled }}{{ $_ := set $c "watchdog" (deepCopy .Values.watchdog.config) }}{{ end -}}
{{- toYaml $c -}}
{{- end }}

{{/*
The configuration of the agents of nodes fenced on their watchdog: the
cluster's, plus the watchdog section, whose device they arm.
*/}}
{{- define "fenced.watchdogConfig" -}}
{{- if not (.Values.watchdog.config).device -}}
{{- fail "watchdog.enabled needs watchdog.config.device, the watchdog its agents arm (e.g. /dev/watchdog0)" -}}
{{- end -}}
{{- $c := include "fenced.clusterConfig" . | fromYaml -}}
{{- $_ := set $c "watchdog" (deepCopy .Values.watchdog.config) -}}
{{- toYaml $c -}}
{{- end }}
