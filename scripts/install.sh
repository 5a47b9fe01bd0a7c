#!/usr/bin/env bash
# Install the project with the CPU build of torch (an unpinned torch pulls a multi-GB CUDA build),
# plus the system tools the tests use: bubblewrap (the code sandbox) and Chromium (the MLflow UI test).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python -m pip install --quiet --disable-pip-version-check -e ".[cpu,dev,data,notebook,ui,ray,cad]"
