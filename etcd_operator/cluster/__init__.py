"""EtcdCluster: spec, naming, manifest builders, observation, planning and actions."""
