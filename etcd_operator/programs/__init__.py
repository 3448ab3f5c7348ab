"""Programs the operator's image runs in the pods it creates (`python -m etcd_operator.programs.NAME`)."""
