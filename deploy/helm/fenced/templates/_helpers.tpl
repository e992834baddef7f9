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
The fencer's configuration: what the values say, with the lease namespace
set to the release namespace unless given (its Leases and the pause
ConfigMap are there, where its Role grants them).
*/}}
{{- define "fenced.fencerConfig" -}}
{{- $c := deepCopy .Values.fencers.config -}}
{{- $f := get $c "fencer" | default dict -}}
{{- if not (hasKey $f "leaseNamespace") -}}
{{- $_ := set $f "leaseNamespace" .Release.Namespace -}}
{{- end -}}
{{- $_ := set $c "fencer" $f -}}
{{- toYaml $c -}}
{{- end }}
