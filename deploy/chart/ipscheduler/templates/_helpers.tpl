{{/* The name of the scheduler's objects, its Lease and its app.kubernetes.io/name label
(so the metrics' job): fullnameOverride; else ip-scheduler for the release ipscheduler or
ip-scheduler (as deploy/, and as `helm install ipscheduler` in the docs), the release's
name when it contains ip-scheduler, and <release>-ip-scheduler otherwise, so that two
releases in one namespace share no object and no Lease. */}}
{{- define "ipscheduler.fullname" -}}
{{- $name := "ip-scheduler" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if has .Release.Name (list "ipscheduler" $name) -}}
{{- $name -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The name of the CNI installer's objects, as in deploy/. */}}
{{- define "ipscheduler.cniName" -}}ipscheduler-ipam{{- end -}}

{{/* Labels every object carries (deploy/'s two, plus Helm's). */}}
{{- define "ipscheduler.commonLabels" -}}
app.kubernetes.io/part-of: ipscheduler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "ipscheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ipscheduler.fullname" . }}
{{- end -}}

{{- define "ipscheduler.labels" -}}
{{ include "ipscheduler.selectorLabels" . }}
{{ include "ipscheduler.commonLabels" . }}
{{- end -}}

{{- define "ipscheduler.cniSelectorLabels" -}}
app.kubernetes.io/name: {{ include "ipscheduler.cniName" . }}
{{- end -}}

{{- define "ipscheduler.cniLabels" -}}
{{ include "ipscheduler.cniSelectorLabels" . }}
{{ include "ipscheduler.commonLabels" . }}
{{- end -}}

{{/* image: repository@digest when digest is set (the tag is then ignored), else
repository:tag, the tag defaulting to the chart's appVersion. Called with (dict "image"
.Values.image "appVersion" .Chart.AppVersion "value" "image"); a digest that is not
ALGORITHM:HEX fails the rendering and names the value. */}}
{{- define "ipscheduler.image" -}}
{{- $image := .image -}}
{{- if $image.digest -}}
{{- if not (regexMatch "^[a-z0-9]+([+._-][a-z0-9]+)*:[a-fA-F0-9]{32,}$" $image.digest) -}}
{{- fail (printf "%s.digest: %q is not a digest such as sha256:<64 hex digits>" .value $image.digest) -}}
{{- end -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository ($image.tag | default .appVersion) -}}
{{- end -}}
{{- end -}}

{{/* mode: "scheduler" or "extender"; anything else fails the rendering. */}}
{{- define "ipscheduler.mode" -}}
{{- if not (has .Values.mode (list "scheduler" "extender")) -}}
{{- fail (printf "mode: %q is neither scheduler (a second scheduler, ipscheduler run) nor extender (kube-scheduler's extender, ipscheduler extender)" (toString .Values.mode)) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end -}}

{{/* extender mode: the name of the Service kube-scheduler calls, and of the ClusterRole
and binding that let the publisher patch nodes/status. */}}
{{- define "ipscheduler.extenderName" -}}
{{- printf "%s-extender" (include "ipscheduler.fullname" . | trunc 54 | trimSuffix "-") -}}
{{- end -}}

{{/* The Lease of leader election: one per release, named as its objects. */}}
{{- define "ipscheduler.leaseName" -}}
{{- include "ipscheduler.fullname" . -}}
{{- end -}}

{{/* The profile schedulerName of .Values.config (a map, or YAML text from --set-file),
or "" when config has none. */}}
{{- define "ipscheduler.configSchedulerName" -}}
{{- $config := .Values.config -}}
{{- if kindIs "string" $config }}{{ $config = fromYaml $config }}{{ end -}}
{{- $profiles := $config.profiles | default list -}}
{{- if $profiles -}}{{- (first $profiles).schedulerName | default "" -}}{{- end -}}
{{- end -}}
