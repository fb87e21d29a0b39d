#!/usr/bin/env bash
# Install what the browser tests (tests/browser/) need: Debian's chromium and the playwright
# Python package. Idempotent. Never runs `playwright install` (no browser download from a CDN):
# the tests drive /usr/bin/chromium through playwright's executable_path.
#
# Usage (CI):  bash scripts/setup-chromium.sh [PYTHON]      PYTHON defaults to .venv/bin/python
set -euo pipefail

PYTHON="${1:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

SUDO=""
if [[ "$(id -u)" != "0" ]] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

if ! command -v chromium >/dev/null 2>&1; then
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium fonts-dejavu-core
fi

if ! "$PYTHON" -c "import playwright" >/dev/null 2>&1; then
  "$PYTHON" -m pip install "playwright>=1.40"
fi

chromium --version
"$PYTHON" -c "import importlib.metadata as m, sys; print('playwright', m.version('playwright'), 'for', sys.executable)"
