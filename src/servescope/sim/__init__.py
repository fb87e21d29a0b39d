"""The pure performance model: model/GPU catalogue, memory fit, step times, and continuous batching on any clock."""
