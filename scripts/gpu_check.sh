#!/usr/bin/env bash
# The CUDA checks of the vLLM engine (docs/engines.md, "On a GPU"), in one run of a few minutes:
# the engine tests, then benchmarks/engines.py eager, with CUDA graphs, with the engine core in its
# own process, and with 256-token completions at ~95M. Needs a GPU and CUDA vLLM in this Python (`pip install -e .[vllm]`).
# Usage: bash scripts/gpu_check.sh [LOG_DIR]   (logs and tables land in LOG_DIR, default gpu_check/)
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:-gpu_check}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=true HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -c "import torch, vllm; assert torch.cuda.is_available(), 'no GPU'; print('torch', torch.__version__, 'vllm', vllm.__version__, torch.cuda.get_device_name(0))" \
  || { echo "scripts/gpu_check.sh needs a GPU and CUDA vLLM (pip install -e .[vllm])"; exit 2; }
start=$(date +%s)
step() { echo "== $1 ($(( $(date +%s) - start )) s)"; }
step "engine tests"
RLVR_REQUIRE_VLLM=1 timeout 180 python3 -m pytest -q -p no:cacheprovider -rA --tb=short tests/rollout/test_vllm_engine.py \
  >"$logs/tests.txt" 2>&1
grep -E "^(PASSED|FAILED|ERROR|E  )|passed|failed" "$logs/tests.txt"
for variant in "eager:" "graphs:--no-enforce-eager" "multiprocessing:--no-enforce-eager --multiprocessing" \
               "long:--sizes 100m --max-new-tokens 256 --no-enforce-eager --multiprocessing"; do
  name=${variant%%:*}
  step "benchmark, vLLM $name"
  # shellcheck disable=SC2086
  timeout 300 python3 benchmarks/engines.py ${variant#*:} >"$logs/bench_$name.txt" 2>&1
  grep -E "^\||prompts x|cannot serve" "$logs/bench_$name.txt"
done
step "done"
