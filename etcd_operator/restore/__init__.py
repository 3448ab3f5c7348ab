"""EtcdRestore: verify a snapshot, seed one member from it, let the others join."""
