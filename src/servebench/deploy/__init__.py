"""Deployments as data: packaged engine profiles and model configs, read for the pure `sim/` core."""
