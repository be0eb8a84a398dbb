{{/* The chart's short name, "cachefleet" unless nameOverride is set. */}}
{{- define "cachefleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's base name: the release name, prefixed with the chart name unless it already
contains it. Object names add a suffix ("-operator"), so this leaves room for it.
*/}}
{{- define "cachefleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of the operator's Deployment, ServiceAccount and RBAC objects. */}}
{{- define "cachefleet.operatorName" -}}
{{- printf "%s-operator" (include "cachefleet.fullname" .) }}
{{- end }}

{{- define "cachefleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels that select the operator's pods; they never change after install. name and component are
fixed, whatever nameOverride says: the NetworkPolicy the operator puts in front of each managed
Redis admits pods labelled app.kubernetes.io/name=cachefleet, app.kubernetes.io/component=operator
from the operator's namespace.
*/}}
{{- define "cachefleet.selectorLabels" -}}
app.kubernetes.io/name: cachefleet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of every object the chart renders. */}}
{{- define "cachefleet.labels" -}}
{{ include "cachefleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: cachefleet
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "cachefleet.chart" . }}
{{- end }}

{{- define "cachefleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cachefleet.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image: repository, then @digest when pinned, else :tag (default appVersion). */}}
{{- define "cachefleet.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The operator's RBAC rules (files/operator-rbac.yaml, synced from operator/rbac.yaml by
scripts/render-deploy), split by scope: "cluster" holds the rules that name only cluster-scoped
resources (kopf's namespace and CRD discovery), "namespaced" the rest. A namespaced install puts
the namespaced rules in a Role per watched namespace and the cluster rules in a small ClusterRole.
Returns {"all": [...], "cluster": [...], "namespaced": [...]} as YAML, "all" in the file's order.
*/}}
{{- define "cachefleet.rbacRules" -}}
{{- $clusterScoped := list "namespaces" "customresourcedefinitions" "clusterkopfpeerings" }}
{{- $cluster := list }}
{{- $namespaced := list }}
{{- $all := .Files.Get "files/operator-rbac.yaml" | fromYamlArray }}
{{- range $rule := $all }}
{{- $onlyCluster := true }}
{{- range $rule.resources }}
{{- if not (has . $clusterScoped) }}{{ $onlyCluster = false }}{{ end }}
{{- end }}
{{- if $onlyCluster }}
{{- $cluster = append $cluster $rule }}
{{- else }}
{{- $namespaced = append $namespaced $rule }}
{{- end }}
{{- end }}
{{- dict "all" $all "cluster" $cluster "namespaced" $namespaced | toYaml }}
{{- end }}
