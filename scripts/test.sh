#!/usr/bin/env bash
# Install the runtime (scripts/install.sh) and the test tools (pytest, DVC, Hugging Face datasets,
# nbclient, Playwright driving Debian's Chromium, Ray, kedro-viz), then run the whole test suite
# (the slow end-to-end tests run at a small size).
set -euo pipefail
cd "$(dirname "$0")/.."
export DO_NOT_TRACK=true KEDRO_DISABLE_TELEMETRY=1 MLFLOW_DISABLE_TELEMETRY=true DVC_NO_ANALYTICS=1
bash scripts/install.sh
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
fi
python -m pip install --quiet --disable-pip-version-check -e ".[cpu,dev,data,notebook,ui,ray,viz]"
python -m pytest -q -p no:cacheprovider "$@"
