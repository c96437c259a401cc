{{- define "fg.name" -}}fgentic-governance{{- end -}}
{{- define "fg.labels" -}}
app.kubernetes.io/name: {{ include "fg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "fg.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- define "fg.webhookService" -}}{{ .Release.Name }}-webhook{{- end -}}
{{- define "fg.tlsSecret" -}}{{ .Values.webhook.tls.secretName | default (printf "%s-webhook-tls" .Release.Name) }}{{- end -}}
