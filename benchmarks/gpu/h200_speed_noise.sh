#!/bin/bash
# On the lent H200 after receive.sh printed READY (../shared/gpu/README.md): run-to-run noise of evalkit's speed
# figures for identical configs, before and after the warm-up, and the gate's speed verdicts on them. Steps:
#   start   a bf16 server (:8000) and, once it is healthy, an online-FP8 one (:8001) of SmolLM2-135M, 0.3 of the
#           GPU's memory each, max-num-seqs 256, each in its own session
#   noise   GSM8K (1,319 documents, 5-shot, greedy) at concurrency 256 against :8000: RUNS (default 5) runs with
#           --no-warmup (the first on the fresh server), then RUNS runs with the default warm-up;
#           benchmarks/speed_noise.py on both sets -> $OUT/noise.json
#   sweep   examples/sweeps/h200-noise.yaml: bf16, bf16 again (the same server: identical configs) and FP8 x greedy
#           and T=1.0/top_p=0.95, concurrency 256, repeats 3 (interleaved), limit 400; the sweep table, the
#           noise of each point and the gate's verdicts bf16 vs bf16b and bf16 vs fp8 (3 vs 3 and one run per
#           side) -> $OUT/sweep.md, $OUT/sweep-noise.json
# The run dirs' summaries and manifests come back in $OUT/runs.tgz.
set -uo pipefail
. benchmarks/gpu/device_env.sh
W=/root/work/noise; mkdir -p $W
case "$1" in
start)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  for spec in "8000:" "8001:--quantization fp8"; do
    port=${spec%%:*}; extra=${spec#*:}
    up $port $extra
    grep "KV cache size" /root/srv-$port.log | tail -1
  done
  ;;
noise)
  wait_healthy 8000 || exit 3
  run() { python3 -m evalkit.cli run gsm8k --endpoint http://127.0.0.1:8000/v1 --concurrency 256 --fresh -q "$@" > /dev/null 2>&1 || echo "run $* failed: $?"; }
  for i in $(seq 1 ${RUNS:-5}); do run --no-warmup -o $W/nowarm/r$i; echo "nowarm r$i at $SECONDS s"; done
  for i in $(seq 1 ${RUNS:-5}); do run -o $W/warm/r$i; echo "warm r$i at $SECONDS s"; done
  python3 -m benchmarks.speed_noise $W/nowarm $W/warm --compare $W/nowarm $W/warm --json $OUT/noise.json
  ;;
sweep)
  wait_healthy 8000 && wait_healthy 8001 || exit 3
  python3 -m evalkit.cli sweep examples/sweeps/h200-noise.yaml -o $W/sweep > $OUT/sweep-stdout.txt 2>&1; echo "sweep exit $? at $SECONDS s"
  cp $W/sweep/sweep.md $OUT/sweep.md
  for d in $W/sweep/runs/*__r1; do p=$(basename ${d%__r1}); mkdir -p $W/points/$p; for r in $W/sweep/runs/${p}__r*; do ln -sfn $r $W/points/$p/$(basename $r); done; done
  cmp=()
  for s in greedy t1; do
    cmp+=(--compare $W/points/bf16__${s}__c256 $W/points/bf16b__${s}__c256 --compare $W/points/bf16__${s}__c256 $W/points/fp8__${s}__c256)
  done
  python3 -m benchmarks.speed_noise $W/points/* "${cmp[@]}" --json $OUT/sweep-noise.json
  for s in greedy t1; do
    for other in bf16b fp8; do
      echo "== evalkit gate bf16 vs $other ($s), 3 vs 3:"
      python3 -m evalkit.cli gate $(for k in 1 2 3; do echo -b $W/sweep/runs/bf16__${s}__c256__r$k; done) \
        $(for k in 1 2 3; do echo -c $W/sweep/runs/${other}__${s}__c256__r$k; done) -o $W/gate-$other-$s 2>&1 | tail -12
    done
  done
  (cd $W && find . -name summary.json -o -name manifest.json -o -name gate.json | tar czf $OUT/runs.tgz -T -)
  tail -5 /root/srv-8000.log > $OUT/srv-tail.txt
  ;;
esac
