#!/usr/bin/env bash
# Install the project with the CPU build of torch (an unpinned torch pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's Chromium for the MLflow UI test (driven by Playwright; no browser download), when missing.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
fi
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python -m pip install --quiet --disable-pip-version-check -e ".[cpu,dev,report,notebook,ui]"
