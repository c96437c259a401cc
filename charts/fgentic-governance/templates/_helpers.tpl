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
{{- /* The webhook's TLS Secret. The generate mode's (Helm's own) has a name of its own: the
bootstrap webhook and cert-manager create theirs at run time, and Helm refuses to adopt an
object it did not create, so a shared name broke `helm upgrade` from those modes (issue 37). */ -}}
{{- define "fg.tlsSecret" -}}
{{- $suffix := ternary "webhook-tls-generated" "webhook-tls" (eq .Values.webhook.tls.mode "generate") }}
{{- .Values.webhook.tls.secretName | default (printf "%s-%s" .Release.Name $suffix) }}
{{- end -}}
{{- define "fg.memoryApi" -}}{{ .Release.Name }}-memory-api{{- end -}}
{{- define "fg.memoryApiUrl" -}}{{ .Values.memoryApi.url | default (printf "http://%s.%s.svc:%v" (include "fg.memoryApi" .) .Release.Namespace .Values.memoryApi.port) }}{{- end -}}
{{- /* The two Pod hooks of the memory routing (render.py _pod_webhooks): kagent's Agent Pods
everywhere, any other Pod in namespaces labelled fgentic.dev/memory-routing=enabled.
Arguments: ctx, names (two), path, operations, ca, mutating. */ -}}
{{/* A PodDisruptionBudget keeping one Pod of a replicated component, only where it has more
than one (at one it would block every node drain): dict ctx, name, namespace, component,
replicas. */}}
{{- define "fg.podDisruptionBudget" -}}
{{- if gt (int .replicas) 1 }}
---
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
    {{- with $.ca }}
    caBundle: {{ . | quote }}
    {{- end }}
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

{{/* A Pod's metadata: the chart's labels, the component's podLabels and the component label
(which nothing overrides: the Deployment selects on it), and podAnnotations.
dict ctx, values (the component's values), component. */}}
{{- define "fg.podMetadata" -}}
{{- $labels := merge (dict "app.kubernetes.io/component" .component) (deepCopy (.values.podLabels | default dict)) (include "fg.labels" .ctx | fromYaml) }}
labels: {{- toYaml $labels | nindent 2 }}
{{- with .values.podAnnotations }}
annotations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A Pod's placement and security: imagePullSecrets (global), priorityClassName,
nodeSelector, tolerations, affinity (default: replicas spread over nodes, preferred, where
there are several), topologySpreadConstraints, and the pod securityContext (the component's,
else the global one). dict ctx, values, replicas, component. */}}
{{- define "fg.podPlacement" -}}
{{- $v := .values }}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.affinity }}
affinity: {{- toYaml $v.affinity | nindent 2 }}
{{- else if gt (int .replicas) 1 }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              app.kubernetes.io/instance: {{ .ctx.Release.Name }}
              app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints: {{- toYaml . | nindent 2 }}
{{- end }}
securityContext: {{- toYaml ($v.podSecurityContext | default .ctx.Values.podSecurityContext) | nindent 2 }}
{{- end -}}

{{/* A container's securityContext: the component's, else the global one. */}}
{{- define "fg.securityContext" -}}
{{- toYaml (.values.securityContext | default .ctx.Values.securityContext) }}
{{- end -}}
