{{/* Names: the release name when it holds the chart's ("gitops-sync"), else <release>-gitops-sync. */}}
{{- define "gitops-sync.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: pods of this release only. */}}
{{- define "gitops-sync.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Every object's labels (the manifests' name and part-of, plus Helm's). */}}
{{- define "gitops-sync.labels" -}}
{{ include "gitops-sync.selectorLabels" . }}
app.kubernetes.io/part-of: gitops-sync
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* fleet mode implies cluster-wide RBAC (as deploy/kubernetes/fleet builds on cluster-wide). */}}
{{- define "gitops-sync.clusterWide" -}}
{{- if or (eq .Values.mode "fleet") (eq .Values.rbac.scope "cluster-wide") -}}true{{- end -}}
{{- end -}}

{{- define "gitops-sync.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* A subject list of the daemon's ServiceAccount. */}}
{{- define "gitops-sync.subjects" -}}
subjects:
  - kind: ServiceAccount
    name: {{ include "gitops-sync.fullname" . }}
    namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* The rules of the ClusterRole or Role named (index . 2) in the manifest file (index . 1) under
files/kubernetes (a link to deploy/kubernetes): the chart and the manifests grant from one text. */}}
{{- define "gitops-sync.rulesOf" -}}
{{- $root := index . 0 -}}
{{- $file := index . 1 -}}
{{- $name := index . 2 -}}
{{- $found := dict -}}
{{- range $doc := splitList "\n---\n" ($root.Files.Get (printf "files/kubernetes/%s" $file)) -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj.rules (eq ($obj.metadata.name | default "") $name) -}}
{{- $_ := set $found "rules" $obj.rules -}}
{{- end -}}
{{- end -}}
{{- if not $found.rules -}}
{{- fail (printf "no rules of %s in files/kubernetes/%s" $name $file) -}}
{{- end -}}
{{ toYaml $found.rules }}
{{- end -}}

{{/* A ClusterRole named <fullname><suffix> with the rules of the manifests' gitops-sync<suffix>. */}}
{{- define "gitops-sync.clusterRole" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 2 -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "gitops-sync.fullname" $root }}{{ $suffix }}
  labels:
    {{- include "gitops-sync.labels" $root | nindent 4 }}
rules:
  {{- include "gitops-sync.rulesOf" (list $root (index . 1) (printf "gitops-sync%s" $suffix)) | nindent 2 }}
{{- end -}}

{{/* A ClusterRoleBinding of <fullname><suffix> to the daemon's ServiceAccount. */}}
{{- define "gitops-sync.clusterRoleBinding" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "gitops-sync.fullname" $root }}{{ $suffix }}
  labels:
    {{- include "gitops-sync.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "gitops-sync.fullname" $root }}{{ $suffix }}
{{ include "gitops-sync.subjects" $root }}
{{- end -}}

{{- define "gitops-sync.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "gitops-sync.fullname" .)) -}}
{{- end -}}

{{/* The Service's DNS names: what the certificate is for. */}}
{{- define "gitops-sync.dnsNames" -}}
{{- $svc := include "gitops-sync.fullname" . -}}
{{- list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) | toJson -}}
{{- end -}}

{{- define "gitops-sync.portName" -}}
{{- if .Values.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}
