#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (C++) for servescope's real-server test tier.
#
# Source: the llama.cpp tree vendored in the `llama-cpp-python` sdist on PyPI (Debian 12 has no
# llama.cpp package). Idempotent: the binary is cached outside the repo, keyed on the version:
#
#   ${SERVESCOPE_CACHE:-$HOME/.cache/servescope}/llama-server-<version>/llama-server
#
# A second run finds the binary and exits at once. Prints the binary's path on the last line of stdout.
# Env: SERVESCOPE_CACHE (cache root), LLAMA_CPP_PYTHON_VERSION (pinned below), BUILD_JOBS (default nproc),
#      PYTHON (a python with pip; default: the repo's .venv, else python3).
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"
DEST="$CACHE/llama-server-$VERSION"
BIN="$DEST/llama-server"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
  echo "llama-server $VERSION already built (cached)" >&2
  echo "$BIN"
  exit 0
fi

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then PYTHON="$REPO_ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
for tool in cmake c++; do
  command -v "$tool" >/dev/null || { echo "error: '$tool' is required to build llama-server" >&2; exit 1; }
done

mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/.llama-build-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo "downloading llama-cpp-python==$VERSION sdist ..." >&2
# --no-binary only for this package: the sdist is what we want; its build backend (scikit-build-core,
# needed by pip to read the metadata) may come as a wheel. Nothing is compiled by pip here.
"$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-python --dest "$WORK" \
  "llama-cpp-python==$VERSION" >&2
sdist="$(ls "$WORK"/llama_cpp_python-"$VERSION".tar.gz "$WORK"/llama-cpp-python-"$VERSION".tar.gz 2>/dev/null | head -n1 || true)"
[[ -n "$sdist" ]] || { echo "error: pip did not download the llama-cpp-python sdist" >&2; exit 1; }
tar -xzf "$sdist" -C "$WORK"
SRC="$(ls -d "$WORK"/llama*cpp*python-"$VERSION"/vendor/llama.cpp 2>/dev/null | head -n1 || true)"
[[ -f "$SRC/CMakeLists.txt" ]] || { echo "error: no vendor/llama.cpp in the sdist" >&2; exit 1; }

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
echo "configuring llama.cpp ..." >&2
cmake "${GEN[@]}" -S "$SRC" -B "$WORK/build" \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >&2
echo "building llama-server (several CPU-minutes) ..." >&2
start_s=$SECONDS
cmake --build "$WORK/build" --target llama-server -j "${BUILD_JOBS:-$(nproc)}" >&2
echo "built in $((SECONDS - start_s)) s" >&2

built="$(find "$WORK/build" -type f -name llama-server -perm -u+x | head -n1)"
[[ -n "$built" ]] || { echo "error: build produced no llama-server binary" >&2; exit 1; }
mkdir -p "$DEST"
cp "$built" "$DEST/llama-server.tmp"
mv -f "$DEST/llama-server.tmp" "$BIN"   # atomic: a half-copied binary never looks cached
"$BIN" --version >&2 || true
echo "$BIN"
