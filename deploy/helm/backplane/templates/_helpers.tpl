{{/* The chart's name, cut to Kubernetes' 63 characters. */}}
{{- define "backplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The resources' name: RELEASE-backplane unless overridden. */}}
{{- define "backplane.fullname" -}}
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

{{/* Labels every resource carries. */}}
{{- define "backplane.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "backplane.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels the Deployment, Service, PDB and NetworkPolicy select on. */}}
{{- define "backplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "backplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "backplane.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "backplane.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the PostgreSQL password. */}}
{{- define "backplane.postgresSecret" -}}
{{- default (printf "%s-postgresql" (include "backplane.fullname" .)) .Values.postgresql.existingSecret }}
{{- end }}

{{/* The Secret holding the callers' and operators' tokens. */}}
{{- define "backplane.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "backplane.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{/* The kubernetes.io/tls Secret serve's certificate comes from. */}}
{{- define "backplane.tlsSecret" -}}
{{- default (printf "%s-tls" (include "backplane.fullname" .)) .Values.tls.secretName }}
{{- end }}

{{/* The store URL, without the password (PGPASSWORD, from the Secret, gives it). */}}
{{- define "backplane.storeURL" -}}
{{- $p := .Values.postgresql }}
{{- $q := printf "sslmode=%s" $p.sslmode }}
{{- if $p.extraParams }}{{ $q = printf "%s&%s" $q $p.extraParams }}{{ end }}
{{- printf "postgres://%s@%s:%v/%s?%s" (urlquery $p.user) $p.host $p.port (urlquery $p.database) $q }}
{{- end }}

{{/* serve's configuration file, rendered from the values. */}}
{{- define "backplane.config" -}}
{{- $serve := dict "http" (printf "0.0.0.0:%v" .Values.serve.port) "allow_remote" true }}
{{- if .Values.serve.publicURL }}{{ $_ := set $serve "public_url" .Values.serve.publicURL }}{{ end }}
{{- if .Values.tls.enabled }}
{{- $tls := dict "cert_file" "/etc/backplane/tls/tls.crt" "key_file" "/etc/backplane/tls/tls.key" }}
{{- if .Values.tls.clientCASecret }}
{{- $_ := set $tls "client_ca_file" "/etc/backplane/client-ca/ca.crt" }}
{{- if .Values.tls.callerFrom }}{{ $_ := set $tls "caller_from" .Values.tls.callerFrom }}{{ end }}
{{- end }}
{{- $_ := set $serve "tls" $tls }}
{{- end }}
{{- $callers := list }}
{{- range .Values.auth.callers }}
{{- $callers = append $callers (dict "caller" .name "token_file" (printf "/etc/backplane/tokens/caller-%s" .name)) }}
{{- end }}
{{- if $callers }}{{ $_ := set $serve "caller_tokens" $callers }}{{ end }}
{{- $operators := list }}
{{- range .Values.auth.operators }}
{{- $operators = append $operators (dict "name" .name "token_file" (printf "/etc/backplane/tokens/operator-%s" .name)) }}
{{- end }}
{{- $cfg := deepCopy .Values.config }}
{{- $own := dict "store" (include "backplane.storeURL" .) "workspace" "/var/lib/backplane/workspace" "serve" $serve "policy" .Values.policy }}
{{- if $operators }}{{ $_ := set $own "operators" $operators }}{{ end }}
{{- if .Values.postgresql.tuning }}{{ $_ := set $own "postgres" .Values.postgresql.tuning }}{{ end }}
{{- /* config.serve may add serve's other keys (oauth, allowed_origins...); the listener, TLS and tokens are the chart's. */}}
{{- if hasKey $cfg "serve" }}
{{- $mine := get $cfg "serve" }}
{{- range $k, $v := $serve }}
{{- if hasKey $mine $k }}{{ fail (printf "config.serve.%s is the chart's: set it through its own values (README.md)" $k) }}{{ end }}
{{- $_ := set $mine $k $v }}
{{- end }}
{{- $_ := set $own "serve" $mine }}
{{- $_ := unset $cfg "serve" }}
{{- end }}
{{- range $k, $v := $own }}
{{- if hasKey $cfg $k }}{{ fail (printf "config.%s is the chart's: set it through its own values (README.md)" $k) }}{{ end }}
{{- $_ := set $cfg $k $v }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}
