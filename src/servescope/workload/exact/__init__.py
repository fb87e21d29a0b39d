"""Prompts of an exact token length: the token counter, the calibrated word units, the builder."""
