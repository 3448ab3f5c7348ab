"""The local substrate: a real kube-apiserver, kube-controller-manager, etcd and MinIO
started as local processes, plus the process node agent (see docs/development.md, "The local default")."""
