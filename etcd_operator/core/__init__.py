"""The pure core: specs, observed state, health, planners, builders and status for
clusters, backups and restores. It imports nothing of the layers above it and no I/O library."""
