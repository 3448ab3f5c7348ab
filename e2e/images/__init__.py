"""Local container images for real nodes, built from local binaries without Docker or a
registry: an OCI archive writer (oci), the image names (names), the recipes (recipes) and
their import into a containerd (containerd). `python -m images build|import` (PYTHONPATH=e2e)."""
