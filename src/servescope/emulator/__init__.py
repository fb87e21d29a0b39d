"""The built-in emulated OpenAI-compatible server: an HTTP shell around the pure `sim/` engine on the wall clock."""
