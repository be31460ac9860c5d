#!/bin/bash
# On the lent H200 after receive.sh printed READY. gsm8k: both --serve runs, then a fresh dev-mode server for
# `aime`. aime: probes + AIME25 on that fresh server (the first sampled requests it sees), then a warm AIME25.
set -uo pipefail
. benchmarks/gpu/device_env.sh
W=/root/work; URL=http://127.0.0.1:8000; mkdir -p $W
case "$1" in
gsm8k)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import vllm, lm_eval, evalkit; print('vllm', vllm.__version__)"
  for n in 256 64; do
    t0=$SECONDS
    python3 -m evalkit.cli run gsm8k --serve $M --served-model-name smollm2-135m \
      --gpus 0 --gpu-memory-utilization 0.3 --max-num-seqs $n -o $W/gsm8k-max-num-seqs-$n --fresh -q 2>&1 | tail -25
    echo "max-num-seqs $n: whole command $((SECONDS - t0)) s"
  done
  start_server 8000
  echo $! > /root/srv.pid
  tar czf $OUT/gsm8k.tgz -C $W gsm8k-max-num-seqs-256 gsm8k-max-num-seqs-64
  ls -la $OUT
  ;;
aime)
  wait_healthy 8000 || exit 3
  echo "server healthy after ${SECONDS} s of this call"
  python3 benchmarks/gpu/probe_first_token.py $URL chat 0
  python3 benchmarks/gpu/probe_first_token.py $URL chat 0
  python3 -m evalkit.cli run aime25 --endpoint $URL/v1 --num-samples 4 --max-tokens 1024 \
    -o $W/aime25 -q --fresh --max-error-rate 1 2>&1 | tail -20
  python3 benchmarks/gpu/probe_first_token.py $URL chat 1.0 0.95
  python3 benchmarks/gpu/probe_first_token.py $URL completions 1.0 0.95
  python3 -m evalkit.cli run aime25 --endpoint $URL/v1 --num-samples 4 --max-tokens 1024 \
    -o $W/aime25-warm -q --fresh --max-error-rate 1 2>&1 | tail -20
  cp /root/srv-8000.log $W/aime25/server.log
  tar czf $OUT/aime.tgz -C $W aime25 aime25-warm
  ls -la $OUT
  ;;
probe2)
  # a second fresh server: is it the first sampled request (temperature > 0) or the first chat request?
  kill "$(cat /root/srv.pid)"; sleep 8
  start_server 8000  # its log replaces the first server's, kept in $W/aime25/server.log
  wait_healthy 8000 || exit 3
  python3 benchmarks/gpu/probe_first_token.py $URL completions 0
  python3 benchmarks/gpu/probe_first_token.py $URL completions 1.0 1.0
  python3 benchmarks/gpu/probe_first_token.py $URL completions 1.0 0.95
  python3 benchmarks/gpu/probe_first_token.py $URL completions 1.0 0.95
  grep -i -E "compil|triton|warm|sampl" /root/srv-8000.log | tail -30
  ;;
esac
