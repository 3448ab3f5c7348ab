"""EtcdBackup: observe, run the streaming snapshot upload and verification, write status."""
