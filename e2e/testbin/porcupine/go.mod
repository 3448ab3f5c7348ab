// Build recipe for the linearizability checker the substrate tests feed their client
// histories to: a small program on porcupine, the checker etcd's robustness tests use
// (see testbin/build.sh; the program's own sources are part of the recipe's stamp).
module etcd-operator.local/testbin/porcupine

go 1.25.0

require github.com/anishathalye/porcupine v1.3.1
