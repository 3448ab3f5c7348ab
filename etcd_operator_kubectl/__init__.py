"""`kubectl etcd`: a client tool for people running the etcd operator. It reads the
operator's resources and manifests and asks the operator for work through its own custom
resources; the operator never imports it."""
