"""What a timed step is built from: the workload, sharding, activation checkpointing, the
optimizer."""
