"""Async clients the controllers are given: etcd, the Kubernetes API, S3."""
