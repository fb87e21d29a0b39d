"""The hot path: HTTP/1.1 connections with kernel receive stamps, the shard runner, SSE decoding and the chunk fast paths."""
