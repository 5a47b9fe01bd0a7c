#!/usr/bin/env bash
# Install the project with the CPU build of torch (an unpinned torch pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python -m pip install --quiet --disable-pip-version-check -e ".[cpu,dev]"
# The code domain's default sandbox (bubblewrap); `apt-get update` only when the package is missing.
command -v bwrap >/dev/null || { apt-get update -qq && apt-get install -y -qq bubblewrap; }
# The code domain's loader for dataset ids (the `hf` extra).
python -m pip install --quiet --disable-pip-version-check "datasets>=2.18"
