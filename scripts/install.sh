#!/usr/bin/env bash
# Install what a run needs (`kedro run --pipelines=rlvr`, any domain): the project with the CPU
# build of torch (an unpinned torch pulls a multi-GB CUDA build), and bubblewrap, the code
# domain's sandbox. The test tools come with scripts/test.sh. Every package comes from
# requirements.lock, pinned with its hashes (CPython 3.11; re-lock with `python scripts/lock.py`).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap
fi
lock=${RLVR_LOCK:-requirements.lock}
python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
    echo "scripts/install.sh: $lock is resolved for CPython 3.11, not $(python -V 2>&1); use a 3.11 venv," \
         "or install unlocked: pip install -e '.[cpu]'" >&2
    exit 1
}
python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$lock"
python -m pip install --quiet --disable-pip-version-check --no-deps -e .
