"""Kubernetes access for the operator."""
