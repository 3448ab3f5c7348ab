{{- define "etcd-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "etcd-operator.serviceAccountName" -}}
{{- default (include "etcd-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "etcd-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "etcd-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "etcd-operator.labels" -}}
{{ include "etcd-operator.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Namespaced RBAC needs plain namespace names: a Role cannot follow a glob. */}}
{{- define "etcd-operator.checkValues" -}}
{{- if not (has .Values.rbac.scope (list "cluster" "namespaced")) -}}
{{- fail "rbac.scope must be cluster or namespaced" -}}
{{- end -}}
{{- if eq .Values.rbac.scope "namespaced" -}}
{{- if not .Values.watchNamespaces -}}
{{- fail "rbac.scope=namespaced needs watchNamespaces" -}}
{{- end -}}
{{- range .Values.watchNamespaces -}}
{{- if or (contains "*" .) (contains "?" .) (contains "!" .) -}}
{{- fail (printf "rbac.scope=namespaced needs plain namespace names, not %q" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* What the operator does in a namespace it watches (same rules as deploy/rbac.yaml). */}}
{{- define "etcd-operator.workloadRules" -}}
# Its own resources: watched by kopf, patched for status and finalizers.
- apiGroups: [etcd.operator.dev]
  resources: [etcdclusters, etcdbackups, etcdrestores]
  verbs: [get, list, watch, patch]
- apiGroups: [etcd.operator.dev]
  resources: [etcdclusters]
  verbs: [create]  # an EtcdRestore into a new cluster creates it
- apiGroups: [etcd.operator.dev]
  resources: [etcdclusters/status, etcdbackups/status, etcdrestores/status]
  verbs: [get, patch]
- apiGroups: [etcd.operator.dev]
  resources: [etcdclusters/finalizers, etcdrestores/finalizers]
  verbs: [update]  # owner references with blockOwnerDeletion
# Member pods and their data (read by get and list; one operator-wide watch per kind).
- apiGroups: [""]
  resources: [pods, persistentvolumeclaims]
  verbs: [get, list, watch, create, patch, delete]
# Services, PDB and NetworkPolicy: read first (get), created when absent, else patched by
# server-side apply only when the operator's own (label and owner: core/cluster/ownership.py).
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, create, patch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch, delete]  # delete: spec.networkPolicy.enabled turned off
# S3 credentials and CA bundles named by EtcdBackup and EtcdRestore; the certificate
# Secrets of TLS clusters (the Managed issuer creates and renews them with server-side apply).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch, delete]
# Events for people.
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{/* Whether the node a member's local volume is pinned to (its PV's node affinity) is still
in the API: a member whose node was deleted is replaced instead of waiting for it. Only with
rbac.scope=cluster (as deploy/rbac.yaml); namespaced, such a member waits, and says why. */}}
{{- define "etcd-operator.volumeNodeRules" -}}
- apiGroups: [""]
  resources: [persistentvolumes]
  verbs: [get]
- apiGroups: [""]
  resources: [nodes]
  verbs: [list]  # by the PV's kubernetes.io/hostname label, which need not be the Node's name
{{- end -}}

{{/* Cluster-scoped discovery: kopf follows CRDs, and namespaces when watching globs. */}}
{{- define "etcd-operator.discoveryRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch]  # get: is a namespace being deleted (no events are posted there)
# Whether member PVCs may grow (allowVolumeExpansion).
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [get]
{{- end -}}
