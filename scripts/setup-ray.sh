#!/usr/bin/env bash
# Ray for the --ray tests (tests/e2e/test_ray.py): the 'ray' extra of pyproject.toml, at the version
# the tests were measured with, into the project's .venv. Idempotent: a no-op when it is there.
# (The plain `ray` package: the tests start clusters with `ray start --include-dashboard=false`,
# so ray[default]'s dashboard dependencies are not needed.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RAY_VERSION=2.60.0
PY=.venv/bin/python
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('ray') != '$RAY_VERSION')" 2>/dev/null; then
  exit 0
fi
"$PY" -m pip install --quiet --disable-pip-version-check "ray==$RAY_VERSION"
