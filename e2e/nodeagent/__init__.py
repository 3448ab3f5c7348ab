"""The process node agent: makes pods on the local kube-apiserver run as local
processes (see README.md in this directory)."""
