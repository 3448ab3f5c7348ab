"""One reconciler per resource, with the observers and executors that do its I/O."""
