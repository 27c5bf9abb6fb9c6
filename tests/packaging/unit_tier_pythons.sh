#!/usr/bin/env bash
# The unit tier (tests/unit) under several Python versions, each against the built wheel in its own venv.
# Wheel and tests both come from the committed tree (git archive HEAD), so work in progress cannot mix in.
# usage: tests/packaging/unit_tier_pythons.sh PYTHON...   e.g. /root/.pyenv/versions/3.12.1/bin/python
# Needs uv on PATH. Not part of `make test`: it downloads. For a Python other than the one the local CPU torch
# wheel was built for, torch==2.13.0 comes from PyPI as a CUDA build (~3 GB into uv's cache, once), used here on
# the CPU; set UV_FIND_LINKS to a folder of local wheels to use those first.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${WORK:-/tmp/sinkscope-pythons}
mkdir -p "$work"
rm -rf "$work/head" "$work/dist" && mkdir -p "$work/head"
git -C "$root" archive HEAD | tar -x -C "$work/head"
"$root/.venv/bin/python" -m build --no-isolation --wheel --outdir "$work/dist" "$work/head" > "$work/build.log" 2>&1
wheel=$(ls "$work"/dist/sinkscope-*.whl)
status=0
for python in "$@"; do
  version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  venv="$work/py$version"
  [ -x "$venv/bin/python" ] || uv venv -q -p "$python" "$venv"
  uv pip install -q -p "$venv/bin/python" --reinstall-package sinkscope torch==2.13.0 "$wheel" pytest hypothesis
  echo "== $("$venv/bin/python" -c 'import sys, torch, sinkscope; print("Python", sys.version.split()[0], "torch", torch.__version__, "sinkscope from", sinkscope.__file__)')"
  (cd "$work" && HF_HUB_OFFLINE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider "$work/head/tests/unit") || status=1
done
exit $status
