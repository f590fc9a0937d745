{{/* The name of the chart's objects. */}}
{{- define "spanwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "spanwatch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the agent's pods: never change them in an
upgrade (a DaemonSet's selector is immutable). */}}
{{- define "spanwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spanwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "spanwatch.labels" -}}
{{ include "spanwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: agent
{{- if not .Values.standalone }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}
{{- end -}}

{{- define "spanwatch.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{- define "spanwatch.serviceAccountName" -}}
{{- default (include "spanwatch.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "spanwatch.configMapName" -}}
{{- default (printf "%s-rules" (include "spanwatch.fullname" .)) .Values.config.existingConfigMap -}}
{{- end -}}

{{/* The Secret holding the web configuration, "" without one. */}}
{{- define "spanwatch.webSecretName" -}}
{{- if .Values.webConfig.existingSecret -}}
{{- .Values.webConfig.existingSecret -}}
{{- else if .Values.webConfig.config -}}
{{- printf "%s-web" (include "spanwatch.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* How the kubelet probes the agent: http, https or tcp (values.yaml,
probes.mode). */}}
{{- define "spanwatch.probeMode" -}}
{{- $mode := .Values.probes.mode -}}
{{- if eq $mode "auto" -}}
{{- $c := .Values.webConfig.config -}}
{{- $tls := default dict (get $c "tls_server_config") -}}
{{- $clientAuth := default "" (get $tls "client_auth_type") -}}
{{- if .Values.webConfig.existingSecret -}}
tcp
{{- else if or (get $c "basic_auth_users") (has $clientAuth (list "RequireAnyClientCert" "RequireAndVerifyClientCert")) -}}
tcp
{{- else if or (get $tls "cert_file") (get $tls "cert") -}}
https
{{- else -}}
http
{{- end -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{- define "spanwatch.probe" -}}
{{- $mode := include "spanwatch.probeMode" .root -}}
{{- if eq $mode "tcp" }}
tcpSocket:
  port: metrics
{{- else }}
httpGet:
  path: {{ .path }}
  port: metrics
  scheme: {{ upper $mode }}
{{- end }}
{{- end -}}
