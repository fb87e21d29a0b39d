"""The server under test, before and after the clock: preflight, the capability probe, the engine table
(engines.py), the Prometheus reader (prometheus.py) and the scrape of its metrics page."""
