"""Deployments as data: packaged engine profiles and model configs, read for the pure `sim/` core."""

#: The profile the built-in emulator serves when none is named: `servescope emulate`, and `servescope run`
#: or `sweep` without --url. A saved deployment (deploy/profiles/llama-3.1-8b.yaml), so the default is a
#: real model on a real GPU; tests name the made-up `tiny` profile explicitly.
DEFAULT_PROFILE = "llama-3.1-8b"
