"""EtcdBackup decisions: schedules, retries, retention, manifests and status."""
