"""What a run leaves: per-request records, the result directory, the typed summary and the pure metrics over it."""
