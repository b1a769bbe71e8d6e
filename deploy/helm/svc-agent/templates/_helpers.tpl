{{/* The chart's name, or nameOverride. */}}
{{- define "svc-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The full name of every object: fullnameOverride, else the release name (which contains the chart's name here). */}}
{{- define "svc-agent.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "svc-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "svc-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "svc-agent.labels" -}}
{{ include "svc-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: agent
app.kubernetes.io/part-of: svc-agent
{{- end -}}

{{- define "svc-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "svc-agent.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The port the agent listens on: the part of config.self_telemetry.listen after the last colon. */}}
{{- define "svc-agent.port" -}}
{{- splitList ":" .Values.config.self_telemetry.listen | last | int -}}
{{- end -}}

{{- define "svc-agent.tokenSecretName" -}}
{{- if .Values.apiToken.existingSecret -}}
{{- .Values.apiToken.existingSecret -}}
{{- else -}}
{{- printf "%s-api-token" (include "svc-agent.fullname" .) -}}
{{- end -}}
{{- end -}}
