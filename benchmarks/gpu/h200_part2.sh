#!/bin/bash
# On the lent H200, right after part 1 (its dev-mode vLLM on :8000 still running): AIME25 against it, then
# benchmarks/bench_gsm8k.py (raw client sweep, evalkit at defaults, lm-eval local-completions at its best and
# default concurrency, one-at-a-time parity). Results go to $OUT.
set -uo pipefail
. benchmarks/gpu/device_env.sh
W=/root/work; mkdir -p $W
wait_healthy 8000 || exit 3
python3 -m evalkit.cli run aime25 --endpoint http://127.0.0.1:8000/v1 --num-samples 4 --max-tokens 1024 \
  -o $W/aime -q --fresh --max-error-rate 1 2>&1 | tail -20
python3 -m benchmarks.bench_gsm8k --endpoint http://127.0.0.1:8000/v1 --raw-concurrency 64,128,256,512 \
  --lm-eval-default --parity-limit 200 --out $OUT/bench.json 2>&1 | grep -v Warning | tail -30
tar czf $OUT/part2.tgz -C $W aime
cp /root/srv-8000.log $OUT/server-part2.log
