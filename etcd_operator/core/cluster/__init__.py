"""EtcdCluster decisions: spec, naming, builders, health, planning and status."""
