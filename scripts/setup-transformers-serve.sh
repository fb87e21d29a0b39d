#!/usr/bin/env bash
# Install Hugging Face `transformers serve` (CPU) into its own venv for servescope's real-server tests.
#
# Idempotent; cached outside the repo, keyed on the versions:
#
#   ${SERVESCOPE_CACHE:-$HOME/.cache/servescope}/hf-serve-<transformers version>/bin/transformers
#
# torch is installed FIRST and explicitly as the CPU build (a local wheel in $TORCH_WHEELS_DIR, default
# /opt/wheels; the script stops if there is none), so that pip never pulls a CUDA torch.
# Prints the `transformers` executable's path on the last line of stdout.
set -euo pipefail

TRANSFORMERS_VERSION="${TRANSFORMERS_VERSION:-5.23.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"
VENV="$CACHE/hf-serve-$TRANSFORMERS_VERSION"
EXE="$VENV/bin/transformers"
MARKER="$VENV/.servescope-complete-torch-$TORCH_VERSION"

if [[ -f "$MARKER" && -x "$EXE" ]]; then
  echo "transformers serve $TRANSFORMERS_VERSION already installed (cached)" >&2
  echo "$EXE"
  exit 0
fi

PY="${PYTHON:-python3}"
mkdir -p "$CACHE"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

start_s=$SECONDS
wheel="$(ls "${TORCH_WHEELS_DIR:-/opt/wheels}"/torch-"$TORCH_VERSION"+cpu-*.whl 2>/dev/null | head -n1 || true)"
if [[ -n "$wheel" ]]; then
  echo "installing torch from $wheel ..." >&2
  "${PIP[@]}" install --quiet "$wheel" >&2
else
  # The package registry's plain torch is a CUDA build with several GB of dependencies: refuse it.
  echo "error: no CPU torch wheel torch-$TORCH_VERSION+cpu-*.whl in ${TORCH_WHEELS_DIR:-/opt/wheels};" \
       "set TORCH_WHEELS_DIR to a folder holding one" >&2
  exit 1
fi
installed_torch="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')"
echo "torch $installed_torch" >&2

# Pin torch to what is installed so that resolving transformers cannot swap it for a CUDA build.
echo "torch==$installed_torch" >"$VENV/constraints.txt"
echo "installing transformers[serving]==$TRANSFORMERS_VERSION ..." >&2
"${PIP[@]}" install --quiet -c "$VENV/constraints.txt" "transformers[serving]==$TRANSFORMERS_VERSION" >&2

if "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(any(d.startswith("nvidia-") for d in (x.metadata["Name"] for x in m.distributions())))'; then
  :
else
  echo "error: a CUDA package (nvidia-*) was installed into $VENV; refusing" >&2
  exit 1
fi
"$EXE" --help >/dev/null 2>&1 || "$EXE" serve --help >/dev/null
touch "$MARKER"
echo "installed in $((SECONDS - start_s)) s" >&2
echo "$EXE"
