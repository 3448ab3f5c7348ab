"""EtcdRestore: verify a snapshot, seed the members from it, write status."""
