"""The hot path: measured requests, from schedule to record.

`shard` runs a schedule (`spec`) over `pool` (keep-alive connections of `conn`, read through
`transport` with kernel receive stamps and `coalesce`d when streams deliver very fast); body bytes
go to `sinks` (SSE via `sse`, `openai`'s accumulator, `fastpath` in bulk); `outcome` turns each
response into its record.
"""
