"""`make bench`: timings and memory of the operator on the local substrate, each figure
printed beside its baseline from the same run. Benchmarks, not tests: nothing asserts."""
