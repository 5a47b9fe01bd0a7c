#!/usr/bin/env bash
# The verifiers adapter's tests and a tiny `kedro run --env verifiers`: `verifiers` (and the example taskset) in its own venv (scripts/install_verifiers.sh),
# driven through `vf-eval` against the policy endpoint served from this environment's Python.
# RLVR_REQUIRE_VERIFIERS=1 turns "verifiers is not installed" from a skip into a failure. Usage: bash scripts/test_verifiers.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
export DO_NOT_TRACK=true KEDRO_DISABLE_TELEMETRY=1 MLFLOW_DISABLE_TELEMETRY=true DVC_NO_ANALYTICS=1
venv=${RLVR_VERIFIERS_VENV:-.venv-verifiers}
bash scripts/install_verifiers.sh "$venv"
RLVR_VERIFIERS_VENV="$venv" RLVR_REQUIRE_VERIFIERS=1 python -m pytest -q -p no:cacheprovider \
  tests/rollout/test_verifiers_adapter.py tests/pipelines/test_verifiers_rlvr.py "$@"
