"""The controller benchmark: host/task pairs split in advance into training and
evaluation pairs, an oracle menu of fixed decisions per pair chosen on tuning seeds'
validation, and each controller scored against ``wait`` and that oracle
(docs/results/controller-benchmark.md)."""
