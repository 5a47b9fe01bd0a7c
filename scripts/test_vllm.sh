#!/usr/bin/env bash
# The vLLM engine's tests (tests/**/test_vllm*.py, marker `vllm`), in the vLLM venv that scripts/install_vllm.sh builds.
# RLVR_REQUIRE_VLLM=1 turns "vLLM is not installed" from a skip into a failure. Usage: bash scripts/test_vllm.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
export DO_NOT_TRACK=true KEDRO_DISABLE_TELEMETRY=1 MLFLOW_DISABLE_TELEMETRY=true DVC_NO_ANALYTICS=1 VLLM_NO_USAGE_STATS=1
venv=${VLLM_VENV:-.venv-vllm}
bash scripts/install_vllm.sh "$venv"
mapfile -t tests < <(find tests -name 'test_vllm*.py' | sort)
RLVR_REQUIRE_VLLM=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}" "$@"
