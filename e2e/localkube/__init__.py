"""The local substrate: a real kube-apiserver, kube-controller-manager, etcd and MinIO
started as local processes, and three real nodes (see docs/development.md, "The local default")."""
