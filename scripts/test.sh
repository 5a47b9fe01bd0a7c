#!/usr/bin/env bash
# Install, then run the whole test suite (the slow end-to-end tests run at a small size).
set -euo pipefail
cd "$(dirname "$0")/.."
export DO_NOT_TRACK=true KEDRO_DISABLE_TELEMETRY=1 MLFLOW_DISABLE_TELEMETRY=true DVC_NO_ANALYTICS=1
bash scripts/install.sh
python -m pytest -q -p no:cacheprovider "$@"
