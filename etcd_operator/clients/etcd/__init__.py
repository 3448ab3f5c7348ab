"""Async access to etcd members (cluster membership, maintenance, snapshots)."""
