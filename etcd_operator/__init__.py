"""A Kubernetes operator for etcd: clusters, streamed backups and safe restores."""

API_GROUP = "etcd.operator.dev"
API_VERSION = "v1alpha1"
DEFAULT_OPERATOR_IMAGE = "ghcr.io/etcd-operator/etcd-operator:0.1.0"  # the chart's repository:appVersion
