"""The server under test, before and after the clock: preflight, the capability probe, the engine table and its /metrics."""
