#!/usr/bin/env bash
# The project's virtual environment, made or brought up to date: sourced by scripts/check,
# scripts/test-unit and scripts/test. Creates .venv with Python 3.11 (or $PYTHON) when there is none,
# and installs servescope editable with its test extras whenever pyproject.toml changed since the last
# install (a stamp in .venv), so a warm run costs nothing.
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  PY=$(command -v python3.11 || command -v python3)
fi
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
_stamp=.venv/.servescope-installed
_want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -f "$_stamp" || "$(cat "$_stamp")" != "$_want" ]] || ! .venv/bin/python -c "import servescope" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
  echo "$_want" > "$_stamp"
fi
