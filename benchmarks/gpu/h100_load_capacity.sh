#!/bin/bash
# On a lent H100/H200, after ../shared/gpu's receive.sh printed READY (docs/benchmarks/archive/gpu-leases.md), the
# load, client and capacity figures of issues 46-48, one step per call (results under $OUT):
#   serve     two dev-mode vLLM servers of SmolLM2-135M: :8000 with --max-num-seqs 256, :8001 with 32
#   load      `evalkit run random` 1024/128 (Poisson) at three rates against :8000 -> $OUT/random-R/
#   bench     benchmarks/bench_gsm8k.py: ROUNDS (default 3) rounds, whole command and request phase against the best
#             raw client -> $OUT/bench.json
#   procs     benchmarks/bench_client_processes.py with 1, 2, 4 and 8 sender processes on the host's cores
#   capacity  `evalkit capacity random` 1024/128 within TTFT <= 250 ms and TPOT <= 25 ms at 99%, on :8000 and :8001
#   schedule  benchmarks/bench_schedule.py (500 req/s, 60 s, the fast test server) on 2 of the host's cores
#             (taskset: the 2-core bound on a quiet machine), then on all of them -> $OUT/schedule-*.json
#   lease     the short lease's first call: procs (1, 2 and 8 processes, 5 test servers, one round, on a quiet
#             host); :8000 started and schedule on 2 cores while it starts; bench (2 rounds) once :8000 answers
#   lease2    the second call, while the machine is warm: load (20 s per rate) on :8000, then :8001 started and
#             capacity on both (from 64 req/s, 8 s points, 100 s at most each)
#   lease3    one call on a fresh lease: procs at a size where 8 senders send for seconds (50,000 requests, 512 in
#             flight, 6 test servers) on a quiet host, then both servers started and capacity on both
set -uo pipefail
. benchmarks/gpu/device_env.sh
export EVALKIT_HISTORY_URL=off
case "${1:?serve|load|bench|procs|capacity|schedule|lease|lease2|lease3}" in
serve)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  start_server 8001 --max-num-seqs 32
  up 8000
  wait_healthy 8001 || exit 3
  echo ":8001 healthy at ${SECONDS} s"
  ;;
load)
  for rate in ${RATES:-20 60 120}; do
    curl -sf -X POST http://127.0.0.1:8000/reset_prefix_cache > /dev/null
    python3 -m evalkit.cli run random --endpoint http://127.0.0.1:8000/v1 --random-input-len 1024 \
      --random-output-len 128 --num-prompts $((rate * ${SECONDS_PER_RATE:-30})) --request-rate "$rate" --seed 0 \
      -q -o "$OUT/random-$rate" 2>&1 | tail -4
  done
  ;;
bench)
  python3 -m benchmarks.bench_gsm8k --endpoint http://127.0.0.1:8000/v1 --raw-concurrency 128,256,512 \
    --rounds "${ROUNDS:-3}" --lm-eval none --out "$OUT/bench.json" 2>&1 | grep -v Warning | tail -30
  ;;
procs)
  nproc
  python3 -m benchmarks.bench_client_processes --processes 1,2,4,8 --servers 4 --num-prompts 10000 --rounds 2 \
    --json "$OUT/procs.json" 2>&1 | tail -20
  ;;
capacity)
  for port_seqs in 8000:256 8001:32; do
    port=${port_seqs%:*} seqs=${port_seqs#*:}
    python3 -m evalkit.cli capacity random --endpoint http://127.0.0.1:$port/v1 --random-input-len 1024 \
      --random-output-len 128 --goodput ttft:250 --goodput tpot:25 --start-rate "${START:-8}" \
      --point-duration "${POINT:-15s}" --max-duration "${MAXDUR:-230s}" --cost-per-gpu-hour 2.5 --gpus-billed 1 \
      -o "$OUT/capacity-seqs$seqs" 2>&1 | tail -3
  done
  ;;
schedule)
  taskset -c 0,1 python3 -m benchmarks.bench_schedule --json "$OUT/schedule-2cores.json" 2>&1 | tail -6
  python3 -m benchmarks.bench_schedule --json "$OUT/schedule-all-cores.json" 2>&1 | tail -6
  ;;
lease)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
  python3 -m benchmarks.bench_client_processes --processes 1,2,8 --servers 5 --num-prompts 10000 --rounds 1 \
    --json "$OUT/procs.json" 2>&1 | tail -8
  start_server 8000
  taskset -c 14,15 python3 -m benchmarks.bench_schedule --json "$OUT/schedule-2cores.json" 2>&1 | tail -6
  wait_healthy 8000 || exit 3
  echo ":8000 healthy at ${SECONDS} s"
  ROUNDS=2 bash "$0" bench
  ;;
lease2)
  wait_healthy 8000 || exit 3
  SECONDS_PER_RATE=20 bash "$0" load
  start_server 8001 --max-num-seqs 32
  wait_healthy 8001 || exit 3
  START=64 POINT=8s MAXDUR=100s bash "$0" capacity
  ;;
lease3)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
  python3 -m benchmarks.bench_client_processes --processes 1,2,8 --servers 6 --num-prompts 50000 \
    --concurrency 512 --rounds 1 --json "$OUT/procs-50k.json" 2>&1 | tail -8
  start_server 8000
  start_server 8001 --max-num-seqs 32
  wait_healthy 8000 || exit 3
  wait_healthy 8001 || exit 3
  echo ":8000 and :8001 healthy at ${SECONDS} s"
  START=64 POINT=8s MAXDUR=100s bash "$0" capacity
  ;;
esac
