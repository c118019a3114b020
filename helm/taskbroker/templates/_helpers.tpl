{{/* Names and labels. */}}
{{- define "taskbroker.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "taskbroker.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "taskbroker.selectorLabels" -}}
app.kubernetes.io/name: {{ include "taskbroker.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "taskbroker.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "taskbroker.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: taskbroker
{{- end }}

{{- define "taskbroker.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "taskbroker.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "taskbroker.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Mode checks; values.schema.json says the same, these also hold with --skip-schema-validation. */}}
{{- define "taskbroker.postgres" -}}
{{- if eq .Values.database.mode "postgres" }}true{{ end }}
{{- end }}

{{/* A database the replicas share (postgres or mysql): several replicas, RollingUpdate, HPA, PDB, migration Job. */}}
{{- define "taskbroker.shared" -}}
{{- if has .Values.database.mode (list "postgres" "mysql") }}true{{ end }}
{{- end }}

{{- define "taskbroker.validate" -}}
{{- $mode := .Values.database.mode }}
{{- if not (has $mode (list "sqlite" "postgres" "mysql")) }}
{{- fail (printf "database.mode must be sqlite, postgres or mysql, not %q" $mode) }}
{{- end }}
{{- if eq $mode "sqlite" }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail "database.mode=sqlite runs exactly one replica: set replicaCount to 1, or use database.mode=postgres or mysql" }}
{{- end }}
{{- if .Values.autoscaling.enabled }}
{{- fail "database.mode=sqlite cannot autoscale: set autoscaling.enabled=false, or use database.mode=postgres or mysql" }}
{{- end }}
{{- if not (hasPrefix "/data/" .Values.database.sqlite.path) }}
{{- fail "database.sqlite.path must lie under /data/, where the volume is mounted" }}
{{- end }}
{{- else if eq $mode "postgres" }}
{{- if not .Values.database.postgres.existingSecret }}
{{- fail "database.mode=postgres needs database.postgres.existingSecret: a Secret whose key database.postgres.secretKey holds the postgres:// URL" }}
{{- end }}
{{- else }}
{{- if not .Values.database.mysql.existingSecret }}
{{- fail "database.mode=mysql needs database.mysql.existingSecret: a Secret whose key database.mysql.secretKey holds the mysql:// URL" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Seconds the kubelet waits before SIGKILL; see values.yaml server.terminationGracePeriodSeconds. */}}
{{- define "taskbroker.terminationGracePeriodSeconds" -}}
{{- $s := .Values.server }}
{{- if gt (int $s.terminationGracePeriodSeconds) 0 }}
{{- int $s.terminationGracePeriodSeconds }}
{{- else }}
{{- add (int $s.preStopSleepSeconds) (int $s.maxWaitSeconds) (int $s.shutdownGraceSeconds) 5 }}
{{- end }}
{{- end }}

{{/* One TOML value: strings quoted, whole numbers without ".0" (values arrive as float64). */}}
{{- define "taskbroker.tomlValue" -}}
{{- $v := . }}
{{- if kindIs "string" $v }}
{{- $v | toJson }}
{{- else if kindIs "bool" $v }}
{{- $v }}
{{- else if or (kindIs "float64" $v) (kindIs "float32" $v) }}
{{- if eq (float64 $v) (floor $v) }}{{ int64 $v }}{{ else }}{{ $v }}{{ end }}
{{- else if kindIs "slice" $v }}
{{- $items := list }}
{{- range $v }}{{ $items = append $items (include "taskbroker.tomlValue" .) }}{{ end }}
{{- printf "[%s]" (join ", " $items) }}
{{- else if kindIs "map" $v }}
{{- $items := list }}
{{- range $k, $x := $v }}{{ $items = append $items (printf "%s = %s" ($k | toJson) (include "taskbroker.tomlValue" $x)) }}{{ end }}
{{- printf "{ %s }" (join ", " $items) }}
{{- else }}
{{- $v }}
{{- end }}
{{- end }}

{{/* The TOML file given to --config: the chart's own keys, then .Values.config. */}}
{{- define "taskbroker.configToml" -}}
{{- $s := .Values.server -}}
# Rendered by the taskbroker chart from values.yaml (server, config).
listen = {{ printf "%s:%d" $s.bindAddress (int $s.grpcPort) | toJson }}
metrics_listen = {{ printf "%s:%d" $s.bindAddress (int $s.metricsPort) | toJson }}
shutdown_grace = {{ printf "%ds" (int $s.shutdownGraceSeconds) | quote }}
{{- range $k, $v := .Values.config }}
{{- if not (kindIs "map" $v) }}
{{ $k }} = {{ include "taskbroker.tomlValue" $v }}
{{- end }}
{{- end }}
{{- range $k, $v := .Values.config }}
{{- if kindIs "map" $v }}

[{{ $k }}]
{{- range $k2, $v2 := $v }}
{{- if not (kindIs "map" $v2) }}
{{ $k2 }} = {{ include "taskbroker.tomlValue" $v2 }}
{{- end }}
{{- end }}
{{- range $k2, $v2 := $v }}
{{- if kindIs "map" $v2 }}

[{{ $k }}.{{ $k2 | toJson }}]
{{- range $k3, $v3 := $v2 }}
{{ $k3 }} = {{ include "taskbroker.tomlValue" $v3 }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* TASKBROKER_DATABASE_URL for every mode. */}}
{{- define "taskbroker.databaseUrlEnv" -}}
- name: TASKBROKER_DATABASE_URL
{{- if include "taskbroker.shared" . }}
{{- $db := get .Values.database .Values.database.mode }}
  valueFrom:
    secretKeyRef:
      name: {{ $db.existingSecret }}
      key: {{ $db.secretKey }}
{{- else }}
  value: {{ printf "sqlite://%s" .Values.database.sqlite.path | quote }}
{{- end }}
{{- end }}

{{/* Postgres over TLS: PGSSLMODE and PGSSLROOTCERT (the URL's sslmode/sslrootcert win). */}}
{{- define "taskbroker.postgresTlsEnv" -}}
{{- if include "taskbroker.postgres" . }}
{{- $t := .Values.database.postgres.tls }}
{{- if $t.sslMode }}
- name: PGSSLMODE
  value: {{ $t.sslMode | quote }}
{{- end }}
{{- if $t.caSecret }}
- name: PGSSLROOTCERT
  value: /etc/taskbroker/postgres-ca/ca.crt
{{- end }}
{{- end }}
{{- end }}

{{- define "taskbroker.postgresCaMount" -}}
{{- if and (include "taskbroker.postgres" .) .Values.database.postgres.tls.caSecret }}
- name: postgres-ca
  mountPath: /etc/taskbroker/postgres-ca
  readOnly: true
{{- end }}
{{- end }}

{{- define "taskbroker.postgresCaVolume" -}}
{{- $t := .Values.database.postgres.tls }}
{{- if and (include "taskbroker.postgres" .) $t.caSecret }}
- name: postgres-ca
  secret:
    secretName: {{ $t.caSecret }}
    defaultMode: 0444
    items:
      - key: {{ $t.caKey }}
        path: ca.crt
{{- end }}
{{- end }}

{{/* Pod labels of the `helm test` pod (the NetworkPolicy admits it on the gRPC port). */}}
{{/* Not the broker's selector labels: the Service must never pick the test pod. */}}
{{- define "taskbroker.testLabels" -}}
app.kubernetes.io/name: {{ include "taskbroker.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
{{- end }}

{{/* Pod labels of the relay (templates/relay-deployment.yaml); the NetworkPolicy admits */}}
{{/* them on the gRPC port. Not the broker's selector labels: the Service must never pick them. */}}
{{- define "taskbroker.relayLabels" -}}
app.kubernetes.io/name: {{ include "taskbroker.name" . }}-relay
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: relay
{{- end }}
