#!/usr/bin/env bash
# Install what a run needs (`kedro run --pipelines=rlvr`, any domain): the project with the CPU
# build of torch (an unpinned torch pulls a multi-GB CUDA build), and bubblewrap, the code
# domain's sandbox. The test tools come with scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap
fi
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python -m pip install --quiet --disable-pip-version-check -e ".[cpu]"
