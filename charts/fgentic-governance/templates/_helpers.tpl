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
{{- define "fg.memoryApi" -}}{{ .Release.Name }}-memory-api{{- end -}}
{{- define "fg.memoryApiUrl" -}}{{ .Values.memoryApi.url | default (printf "http://%s.%s.svc:%v" (include "fg.memoryApi" .) .Release.Namespace .Values.memoryApi.port) }}{{- end -}}
{{- /* The two Pod hooks of the memory routing (render.py _pod_webhooks): kagent's Agent Pods
everywhere, any other Pod in namespaces labelled fgentic.dev/memory-routing=enabled.
Arguments: ctx, names (two), path, operations, ca, mutating. */ -}}
{{/* A PodDisruptionBudget keeping one Pod of a replicated component: dict ctx, name,
namespace, component. */}}
{{- define "fg.podDisruptionBudget" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .namespace }}
  labels: {{- include "fg.labels" .ctx | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ .ctx.Release.Name }}
      app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "fg.podHooks" -}}
{{- $ctx := .ctx }}
{{- range $i, $name := .names }}
- name: {{ $name }}
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: {{ $ctx.Values.webhook.timeoutSeconds }}
  matchPolicy: Equivalent
  {{- if $.mutating }}
  reinvocationPolicy: IfNeeded
  {{- end }}
  clientConfig:
    service:
      name: {{ include "fg.webhookService" $ctx }}
      namespace: {{ $ctx.Release.Namespace }}
      path: {{ $.path }}
    caBundle: {{ $.ca | quote }}
  rules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: {{ toJson $.operations }}
      resources: [pods]
      scope: Namespaced
  {{- if eq $i 0 }}
  # kagent's Agent Pods (both labels; kagent's controller and UI carry neither) where the
  # namespace is not labelled for routing.
  objectSelector:
    matchExpressions:
      - {key: app, operator: In, values: [kagent]}
      - {key: kagent, operator: Exists}
  {{- end }}
  namespaceSelector:
    {{- if ne $i 0 }}
    # Every Pod where the namespace is labelled for routing (service-account routing).
    matchLabels: {fgentic.dev/memory-routing: enabled}
    {{- end }}
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: NotIn
        values: {{- toYaml (concat $ctx.Values.webhook.excludedNamespaces (list $ctx.Release.Namespace)) | nindent 10 }}
      {{- if eq $i 0 }}
      - {key: fgentic.dev/memory-routing, operator: NotIn, values: [enabled]}
      {{- end }}
{{- end }}
{{- end -}}
