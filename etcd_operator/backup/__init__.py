"""EtcdBackup: schedules, the streaming snapshot pipeline, manifests and retention."""
