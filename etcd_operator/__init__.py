"""A Kubernetes operator for etcd: clusters, streamed backups and safe restores."""

API_GROUP = "etcd.operator.dev"
API_VERSION = "v1alpha1"
