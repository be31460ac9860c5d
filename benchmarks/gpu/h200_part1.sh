#!/bin/bash
# On the lent H200, after ../shared/gpu's receive.sh printed READY (see docs/benchmarks/archive/gpu-leases.md):
# evalkit starts vLLM itself, twice (--max-num-seqs 256 and 64), on the full GSM8K test set; then the
# comparison report; then a persistent dev-mode server for part 2. Results go to $OUT/part1.tgz.
set -uo pipefail
. benchmarks/gpu/device_env.sh
W=/root/work; mkdir -p $W
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import vllm, lm_eval, evalkit; print('vllm', vllm.__version__)"
for cfg in "A 256" "B 64"; do
  set -- $cfg
  t0=$SECONDS
  python3 -m evalkit.cli run gsm8k --serve $M --served-model-name smollm2-135m \
    --gpus 0 --gpu-memory-utilization 0.3 --max-num-seqs $2 -o $W/run$1 --fresh -q 2>&1 | tail -25
  echo "run$1 (max-num-seqs $2): whole command $((SECONDS - t0)) s"
done
python3 -m evalkit.cli report $W/runA $W/runB -o $W/compare.html
nvidia-smi --query-gpu=memory.used --format=csv,noheader
start_server 8000
tar czf $OUT/part1.tgz -C $W runA runB compare.html
ls -la $OUT
