{{/* The name of the scheduler's objects: ip-scheduler, as in deploy/. */}}
{{- define "ipscheduler.fullname" -}}
{{- .Values.fullnameOverride | default "ip-scheduler" | trunc 63 | trimSuffix "-" -}}
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

{{/* image: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "ipscheduler.image" -}}
{{- printf "%s:%s" .repository (.tag | default .appVersion) -}}
{{- end -}}

{{/* The profile schedulerName of .Values.config (a map, or YAML text from --set-file),
or "" when config has none. */}}
{{- define "ipscheduler.configSchedulerName" -}}
{{- $config := .Values.config -}}
{{- if kindIs "string" $config }}{{ $config = fromYaml $config }}{{ end -}}
{{- $profiles := $config.profiles | default list -}}
{{- if $profiles -}}{{- (first $profiles).schedulerName | default "" -}}{{- end -}}
{{- end -}}
