{{/* The chart's name, at most 63 characters. */}}
{{- define "gpa.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's objects' name: the release name when it already holds the chart's name. */}}
{{- define "gpa.fullname" -}}
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

{{- define "gpa.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpa.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpa.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpa.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gpa.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpa.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpa.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The config file as rendered: the values' file with the store URL and the in-cluster view set by the chart. */}}
{{- define "gpa.config" -}}
{{- $cfg := deepCopy .Values.config.file }}
{{- $store := deepCopy (default dict $cfg.store) }}
{{- if .Values.store.postgresql.enabled }}
{{- $_ := set $store "url" (printf "${%s}" .Values.store.postgresql.secretKey) }}
{{- else }}
{{- $_ := set $store "url" "sqlite:///data/autoscaler.db" }}   {{- /* relative to the image's WORKDIR: /app/data */}}
{{- end }}
{{- $_ := set $cfg "store" $store }}
{{- if .Values.remoteClusters }}
{{- $clusters := list }}
{{- if .Values.nodeAwareScaleIn.enabled }}
{{- $local := deepCopy (default dict $cfg.kubernetes) }}
{{- $_ := set $local "in_cluster" true }}
{{- $_ := set $local "name" .Values.localCluster }}
{{- $clusters = append $clusters $local }}
{{- end }}
{{- range .Values.remoteClusters }}
{{- $one := dict "name" .name "kubeconfig" (printf "/etc/autoscaler-clusters/%s/%s" .name (default "kubeconfig" .key)) }}
{{- with .context }}{{- $_ := set $one "context" . }}{{- end }}
{{- $clusters = append $clusters $one }}
{{- end }}
{{- $_ := unset $cfg "kubernetes" }}
{{- $_ := set $cfg "clusters" $clusters }}
{{- else if .Values.nodeAwareScaleIn.enabled }}
{{- $kube := deepCopy (default dict $cfg.kubernetes) }}
{{- $_ := set $kube "in_cluster" true }}
{{- $_ := set $cfg "kubernetes" $kube }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* Refuse what cannot work, with a message that says what to set. */}}
{{- define "gpa.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.store.postgresql.enabled) }}
{{- fail (printf "replicaCount %d needs PostgreSQL: several replicas share cooldowns, dedup and leases only through it (docs/replicas.md). Set store.postgresql.enabled=true with the URL in the Secret %q under the key %s, or replicaCount=1 for SQLite." (int .Values.replicaCount) .Values.existingSecret .Values.store.postgresql.secretKey) }}
{{- end }}
{{- if and .Values.store.postgresql.enabled (not .Values.existingSecret) }}
{{- fail (printf "store.postgresql.enabled needs existingSecret: the Secret that holds %s (never a value in values.yaml)" .Values.store.postgresql.secretKey) }}
{{- end }}
{{- if and .Values.store.postgresql.enabled .Values.store.persistence.enabled }}
{{- fail "store.persistence is the SQLite file's volume: with store.postgresql.enabled leave it off" }}
{{- end }}
{{- $names := list .Values.localCluster }}
{{- range .Values.remoteClusters }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,53}[a-z0-9])?$" (toString .name)) }}
{{- fail (printf "remoteClusters: name %q must be lower case letters, digits and '-' (it names the pod's volume cluster-<name>)" (toString .name)) }}
{{- end }}
{{- if has .name $names }}
{{- fail (printf "remoteClusters: %q is named twice (localCluster is %q)" .name $.Values.localCluster) }}
{{- end }}
{{- if not .secretName }}
{{- fail (printf "remoteClusters[%s]: secretName names the Secret that holds its kubeconfig" .name) }}
{{- end }}
{{- $names = append $names .name }}
{{- end }}
{{- if and .Values.remoteClusters .Values.config.existingConfigMap }}
{{- fail "remoteClusters writes clusters: into the chart's config: with config.existingConfigMap, write clusters: there and mount the Secrets yourself (docs/fleet.md)" }}
{{- end }}
{{- end }}

{{/* What the configured pools ask of the Kubernetes API (docs/rbac.md), as YAML: kubernetes (nodes, pods and DRA
read, nodes patched: nodeAwareScaleIn.enabled or config.file's kubernetes.in_cluster), evict (pods/eviction create), budgets (poddisruptionbudgets list). Read from config.file the
way the service reads it (a pool's own scale_in key, else the defaults'); with config.existingConfigMap the chart
cannot read the config, so nodeAwareScaleIn.uses says what its pools use. */}}
{{- define "gpa.kubeNeeds" -}}
{{- $movable := false }}{{- $repair := false }}{{- $forced := false }}{{- $requests := false }}
{{- $kube := .Values.nodeAwareScaleIn.enabled }}
{{- if .Values.config.existingConfigMap }}
{{- $uses := .Values.nodeAwareScaleIn.uses | default dict }}
{{- $movable = $uses.movable }}{{- $repair = $uses.repair }}{{- $forced = $uses.forcedRemoval }}
{{- $requests = $uses.provisioningRequests }}
{{- else }}
{{- $cfg := .Values.config.file | default dict }}
{{- if ($cfg.kubernetes | default dict).in_cluster }}{{- $kube = true }}{{- end }}
{{- if $cfg.provisioning_requests }}{{- $requests = true }}{{- end }}
{{- $defaults := $cfg.defaults | default dict }}
{{- $base := $defaults.scale_in | default dict }}
{{- if $defaults.repair }}{{- $repair = true }}{{- end }}
{{- range $pool := $cfg.pools | default list }}
{{- $own := $pool.scale_in | default dict }}
{{- $victims := $base.victims }}{{- if hasKey $own "victims" }}{{- $victims = $own.victims }}{{- end }}
{{- if eq (toString $victims) "movable" }}{{- $movable = true }}{{- end }}
{{- if $pool.repair }}{{- $repair = true }}{{- end }}
{{- $force := true }}
{{- if hasKey $base "forced_removal" }}{{- $force = $base.forced_removal }}{{- end }}
{{- if hasKey $own "forced_removal" }}{{- $force = $own.forced_removal }}{{- end }}
{{- if and $force (ne (toString $pool.provider) "ack_hook") }}{{- $forced = true }}{{- end }}
{{- end }}
{{- end }}
kubernetes: {{ $kube | toJson }}
evict: {{ and $kube (or $movable $repair $forced) | toJson }}
budgets: {{ and $kube (or $movable $repair) | toJson }}
requests: {{ and $kube $requests | toJson }}
{{- end }}
