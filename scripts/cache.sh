#!/usr/bin/env bash
# Sourced by the setup scripts: CACHE, the root of what they build and install once
# (${SERVESCOPE_CACHE:-~/.cache/servescope}). Where a cache is left under the project's old name
# (~/.cache/servebench) and none under the new one, the new name becomes a link to it, so a renamed
# checkout does not rebuild llama.cpp and the servers' venvs (a link, not a move: the venvs there
# name their own absolute paths). Entries stay keyed on their versions.
CACHE="${SERVESCOPE_CACHE:-$HOME/.cache/servescope}"
if [[ -z "${SERVESCOPE_CACHE:-}" && ! -e "$CACHE" && -d "$HOME/.cache/servebench" ]]; then
  ln -s "$HOME/.cache/servebench" "$CACHE"
fi
