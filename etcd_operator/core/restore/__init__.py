"""EtcdRestore decisions: spec, observed state, planning, builders and status."""
