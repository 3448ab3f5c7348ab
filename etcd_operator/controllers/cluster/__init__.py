"""EtcdCluster: observe the members, carry out the planner's step, write status."""
