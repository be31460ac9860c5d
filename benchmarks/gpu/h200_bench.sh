#!/bin/bash
# On the lent H200, after ../shared/gpu's receive.sh printed READY (see docs/benchmarks/archive/gpu-leases.md), three steps, one call each:
#   serve   start a dev-mode vLLM on :8000 (same flags as the 2026-12-02 runs) and wait until it answers
#   bench   benchmarks/bench_gsm8k.py: ROUNDS (default 5) interleaved rounds of the raw sweep and evalkit at defaults (and, with
#           FIXED=N, evalkit at a fixed N), then lm-eval local-completions at the best raw concurrency -> $OUT/bench.json
#   lmdefault  lm-eval local-completions at its default num_concurrent=1 on the same server -> $OUT/lmeval-c1.json
#   cold    benchmarks/bench_fixed_costs.py on the live server: whole command with a cold and a warm prompt cache,
#           ROUNDS (default 3) rounds, and with OLD=DIR the same interleaved with the evalkit of checkout DIR -> $OUT/cold.json
set -uo pipefail
. benchmarks/gpu/device_env.sh
URL=http://127.0.0.1:8000
case "${1:?serve|bench|lmdefault|cold}" in
serve)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  up 8000
  ;;
bench)
  python3 -c "import vllm, lm_eval; print('vllm', vllm.__version__, 'lm_eval', lm_eval.__version__)"
  python3 -m benchmarks.bench_gsm8k --endpoint $URL/v1 --raw-concurrency 64,128,256,512 --rounds ${ROUNDS:-5} \
    ${FIXED:+--evalkit-fixed $FIXED} --lm-eval best --out $OUT/bench.json 2>&1 | grep -v Warning
  cp /root/srv-8000.log $OUT/server.log
  ;;
lmdefault)
  curl -sf -X POST $URL/reset_prefix_cache && echo "prefix cache reset"
  python3 -m benchmarks.lm_eval_run --endpoint $URL/v1 --model smollm2-135m --num-concurrent 1 \
    | tail -1 | tee $OUT/lmeval-c1.json
  ;;
cold)
  python3 -m benchmarks.bench_fixed_costs --endpoint $URL/v1 --rounds ${ROUNDS:-3} ${OLD:+--code $OLD} \
    --json $OUT/cold.json 2>&1 | grep -v Warning
  ;;
esac
