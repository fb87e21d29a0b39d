"""One benchmark run end to end: its flags, the validated RunConfig, and the orchestration around the shard."""
