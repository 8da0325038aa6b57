{{/* Names and labels. */}}
{{- define "ctxproxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ctxproxy.fullname" -}}
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

{{- define "ctxproxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ctxproxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ctxproxy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ctxproxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ctxproxy.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* PostgreSQL: set when postgres.dsn or postgres.existingSecret is. */}}
{{- define "ctxproxy.postgres" -}}
{{- if or .Values.postgres.dsn .Values.postgres.existingSecret -}}true{{- end -}}
{{- end -}}

{{- define "ctxproxy.postgresSecret" -}}
{{- default (printf "%s-postgres" (include "ctxproxy.fullname" .)) .Values.postgres.existingSecret -}}
{{- end -}}

{{- define "ctxproxy.policiesConfigMap" -}}
{{- default (printf "%s-policies" (include "ctxproxy.fullname" .)) .Values.existingPoliciesConfigMap -}}
{{- end -}}

{{/* The values no pod could run with, refused with a message that says why. */}}
{{- define "ctxproxy.validate" -}}
{{- if and .Values.postgres.dsn .Values.postgres.existingSecret -}}
{{- fail "ctxproxy: set postgres.dsn or postgres.existingSecret, not both" -}}
{{- end -}}
{{- if not (include "ctxproxy.postgres" .) -}}
{{- if gt (int .Values.replicaCount) 1 -}}
{{- fail (printf "ctxproxy: replicaCount %d needs PostgreSQL (postgres.dsn or postgres.existingSecret): without it each pod keeps memory and the ledger in its own files, which cannot be shared; set postgres or replicaCount: 1" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if .Values.autoscaling.enabled -}}
{{- fail "ctxproxy: autoscaling.enabled needs PostgreSQL (postgres.dsn or postgres.existingSecret): a file memory store and ledger cannot be shared between pods" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* shutdownGrace ("30s", "2m") in seconds. */}}
{{- define "ctxproxy.graceSeconds" -}}
{{- $g := toString .Values.shutdownGrace -}}
{{- if hasSuffix "m" $g -}}{{ mul (trimSuffix "m" $g | int) 60 }}{{- else -}}{{ trimSuffix "s" $g | int }}{{- end -}}
{{- end -}}

{{/* The pod security context of the server and the migration Job. */}}
{{- define "ctxproxy.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "ctxproxy.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* CTXPROXY_MEMORY_STORE and CTXPROXY_LEDGER: the Secret's DSN, or the files under /data. */}}
{{- define "ctxproxy.storeEnv" -}}
{{- if include "ctxproxy.postgres" . }}
- name: CTXPROXY_MEMORY_STORE
  valueFrom:
    secretKeyRef:
      name: {{ include "ctxproxy.postgresSecret" . }}
      key: {{ .Values.postgres.key }}
- name: CTXPROXY_LEDGER
  valueFrom:
    secretKeyRef:
      name: {{ include "ctxproxy.postgresSecret" . }}
      key: {{ .Values.postgres.key }}
{{- else }}
- name: CTXPROXY_MEMORY_STORE
  value: file
- name: CTXPROXY_LEDGER
  value: file:/data/ledger.jsonl
{{- end }}
{{- end -}}

{{/* The server's configuration: the binary's own CTXPROXY_* variables, one per value. */}}
{{- define "ctxproxy.env" -}}
- name: CTXPROXY_LISTEN
  value: "0.0.0.0:8080"
- name: CTXPROXY_POLICIES
  value: /policies
- name: CTXPROXY_MEMORY_DIR
  value: /data/memories
- name: CTXPROXY_UPSTREAM
  value: {{ .Values.upstream | quote }}
- name: CTXPROXY_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: CTXPROXY_REQUIRE_KNOWN_TENANT
  value: {{ .Values.requireKnownTenant | toString | quote }}
- name: CTXPROXY_MAX_BODY
  value: {{ .Values.maxBody | quote }}
- name: CTXPROXY_FORWARD_WHILE_READING
  value: {{ .Values.forwardWhileReading | toString | quote }}
- name: CTXPROXY_UPSTREAM_TIMEOUT
  value: {{ .Values.upstreamTimeout | quote }}
- name: CTXPROXY_STREAM_IDLE_TIMEOUT
  value: {{ .Values.streamIdleTimeout | quote }}
- name: CTXPROXY_SHUTDOWN_GRACE
  value: {{ .Values.shutdownGrace | quote }}
- name: CTXPROXY_MEMORY_AUDIT
  value: {{ .Values.memoryAudit | quote }}
{{- with .Values.prices }}
- name: CTXPROXY_PRICES
  value: {{ . | quote }}
{{- end }}
{{- with .Values.limitsStore }}
- name: CTXPROXY_LIMITS_STORE
  value: {{ . | quote }}
{{- end }}
{{- with .Values.ratelimitStore }}
- name: CTXPROXY_RATELIMIT_STORE
  value: {{ . | quote }}
{{- end }}
{{- with .Values.debugAddr }}
- name: CTXPROXY_DEBUG_ADDR
  value: {{ . | quote }}
{{- end }}
{{- if .Values.debugPoisonBuffers }}
- name: CTXPROXY_DEBUG_POISON_BUFFERS
  value: "true"
{{- end }}
{{- if .Values.debugManualClock }}
- name: CTXPROXY_DEBUG_MANUAL_CLOCK
  value: "true"
{{- end }}
{{- if .Values.debugNoCacheTracking }}
- name: CTXPROXY_DEBUG_NO_CACHE_TRACKING
  value: "true"
{{- end }}
- name: CTXPROXY_METRICS_ADDR
  value: {{ printf "0.0.0.0:%d" (int .Values.metricsPort) | quote }}
{{- with .Values.trustedProxies }}
- name: CTXPROXY_TRUSTED_PROXIES
  value: {{ . | quote }}
{{- end }}
{{- include "ctxproxy.storeEnv" . }}
{{- with .Values.adminToken.existingSecret }}
- name: CTXPROXY_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.adminToken.key }}
{{- end }}
{{- with .Values.tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $.Values.tracing.otlpProtocol | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ $.Values.tracing.serviceName | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}
