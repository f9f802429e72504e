{{/* The labels of every object, and the Pods' selector. */}}
{{- define "opkit.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/name: opkit
{{- end }}

{{/* The ClusterRole's name, and the Roles' in other namespaces: unique among engines. */}}
{{- define "opkit.clusterRoleName" -}}
{{ .Release.Namespace }}:{{ .Release.Name }}
{{- end }}

{{/* Whether leader election is on: asked for, or more than one replica. */}}
{{- define "opkit.leaderElection" -}}
{{- if or .Values.leaderElection (gt (int .Values.replicas) 1) }}true{{ end -}}
{{- end }}

{{/* Whether the console is served: only with authentication. */}}
{{- define "opkit.console" -}}
{{- if has .Values.console.auth (list "token" "kubernetes") }}true{{ end -}}
{{- end }}

{{/*
opkit.check refuses values that would install an engine with rules it was
not given, a wildcard, or a console without authentication.
*/}}
{{- define "opkit.check" -}}
{{- $rules := .Values.rules | default dict -}}
{{- if not (or $rules.cluster $rules.namespaces $rules.engine) -}}
{{- fail "rules: no RBAC rules given. This chart has no default rules and never grants a wildcard: write the values for your definitions with `opkit generate values -f operator.yaml > values.yaml` and install with -f values.yaml" -}}
{{- end -}}
{{- $all := concat ($rules.cluster | default list) ($rules.engine | default list) -}}
{{- range $ns, $nsRules := ($rules.namespaces | default dict) -}}
{{- $all = concat $all $nsRules -}}
{{- end -}}
{{- range $rule := $all -}}
{{- range $field := list "apiGroups" "resources" "verbs" "resourceNames" "nonResourceURLs" -}}
{{- if has "*" (get $rule $field | default list) -}}
{{- fail (printf "rules: a rule has %s \"*\"; the engine needs no wildcard: use the rules opkit generate values writes" $field) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.operators.labels (ne .Values.operators.from "cluster") -}}
{{- fail "operators.labels: only with operators.from cluster; with files, the files say which operators the engine runs" -}}
{{- end -}}
{{- if not .Values.image -}}
{{- fail "image: not given. Give the image of the opkit that generated the values, ghcr.io/opkit-dev/opkit:VERSION (never :latest), as `opkit generate values` writes it" -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.archive.secretName) -}}
{{- fail "replicas: more than one replica share one PostgreSQL archive: set archive.secretName, a Secret whose key dsn is its URL" -}}
{{- end -}}
{{- if not (has .Values.console.auth (list "none" "token" "kubernetes")) -}}
{{- fail (printf "console.auth %q: want none (no console), token or kubernetes; the console is never served without authentication" .Values.console.auth) -}}
{{- end -}}
{{- if and (eq .Values.console.auth "token") (not .Values.console.tokenSecret) -}}
{{- fail "console.auth token: set console.tokenSecret, a Secret whose key token is the console's token" -}}
{{- end -}}
{{- if .Values.runsApi.enabled -}}
{{- $granted := false -}}
{{- range $rule := ($rules.cluster | default list) -}}
{{- if and (has "apiservices" ($rule.resources | default list)) (has "v1alpha1.runs.opkit.dev" ($rule.resourceNames | default list)) -}}
{{- $granted = true -}}
{{- end -}}
{{- end -}}
{{- if not $granted -}}
{{- fail "runsApi.enabled: the rules do not let the engine keep the APIService v1alpha1.runs.opkit.dev current: write the values with `opkit generate values --runs-api -f operator.yaml > values.yaml`" -}}
{{- end -}}
{{- end -}}
{{- with .Values.tracing -}}
{{- if and .endpoint (not (regexMatch "^https?://[^/?#]+" (toString .endpoint))) -}}
{{- fail (printf "tracing.endpoint %q: want the OTLP endpoint's URL, http:// or https:// (http://otel-collector.observability:4317)" (toString .endpoint)) -}}
{{- end -}}
{{- if not (has .protocol (list "grpc" "http/protobuf")) -}}
{{- fail (printf "tracing.protocol %q: want grpc or http/protobuf" (toString .protocol)) -}}
{{- end -}}
{{- $ratio := include "opkit.sampleRatio" $ -}}
{{- if ne $ratio "" -}}
{{- if or (not (regexMatch "^([0-9]+([.][0-9]*)?|[.][0-9]+)$" $ratio)) (gt (float64 $ratio) 1.0) -}}
{{- fail (printf "tracing.sampleRatio %q: want a decimal number from 0 to 1 (0.25: a quarter of the traces)" $ratio) -}}
{{- end -}}
{{- if not .endpoint -}}
{{- fail "tracing.sampleRatio: no spans are exported: set tracing.endpoint" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.operators.from (list "cluster" "files")) -}}
{{- fail (printf "operators.from %q: want cluster or files" .Values.operators.from) -}}
{{- end -}}
{{- end }}

{{/*
The labels of a runner's Deployment and Pods, and its selector: not the
engine's (name opkit), so that neither its Deployment nor its Service
selects them. Called with a dict: root, operator, imageHash.
*/}}
{{- define "opkit.runnerLabels" -}}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/name: opkit-runner
opkit.dev/image: {{ .imageHash | quote }}
opkit.dev/operator: {{ .operator }}
{{- end }}

{{/* The restricted security context of a runner's containers. */}}
{{- define "opkit.runnerSecurityContext" -}}
allowPrivilegeEscalation: false
capabilities:
  drop:
  - ALL
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
Whether the SQLite archive is on the PersistentVolumeClaim RELEASE-archive:
without archive.secretName, unless archive.size is "0" (an emptyDir).
*/}}
{{- define "opkit.archiveClaim" -}}
{{- if and (not .Values.archive.secretName) (ne (toString .Values.archive.size) "0") }}true{{ end }}
{{- end }}

{{/*
opkit.operatorSelector is operators.labels as the label selector of opkit
run --selector: k=v,... sorted by key.
*/}}
{{- define "opkit.operatorSelector" -}}
{{- $sel := list -}}
{{- range $k, $v := .Values.operators.labels -}}
{{- $sel = append $sel (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $sel -}}
{{- end -}}

{{/*
opkit.sampleRatio is tracing.sampleRatio as a string, "" when unset (a
number 0 is "0", not unset).
*/}}
{{- define "opkit.sampleRatio" -}}
{{- if not (kindIs "invalid" .Values.tracing.sampleRatio) }}{{ toString .Values.tracing.sampleRatio }}{{ end -}}
{{- end -}}
