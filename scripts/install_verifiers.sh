#!/usr/bin/env bash
# Install `verifiers` (v1 API) and the example taskset into their own venv (default .venv-verifiers):
# verifiers 0.4.0 pins openai<3 and mcp==2.0.0, which conflict with the project's environment (openai 3,
# openenv-core), so it does not share it. The project's verifiers adapter runs this venv's `vf-eval`
# against its policy endpoint (rollout/verifiers_adapter.py). Usage: bash scripts/install_verifiers.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-verifiers}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip --quiet --disable-pip-version-check)
# uv: verifiers prepares its chat harness with `uv sync --script` (else it fetches uv from astral.sh)
"${pip[@]}" install "verifiers==0.4.0" uv
"${pip[@]}" install -e examples/verifiers/sums
"$venv/bin/python" -c "import verifiers, sums; print('verifiers', verifiers.__version__ if hasattr(verifiers, '__version__') else '0.4.0', 'in', '$venv')"
