#!/bin/bash
# On the lent H200 after ../shared/gpu's receive.sh printed READY: the H200 figures of issues 26, 28, 29 and 30
# in four calls (numerics, speed, fp8, serve), the machine kept warm between them, each under the 600 s a call has.
#   numerics  two bf16 servers of SmolLM2-135M, started one after the other (three at once fail their engine
#             start), each in its own session, 0.3 of the GPU's memory and max-num-seqs 256 (the flags of every
#             earlier lease): :8000 (dev mode) and a second process with the same flags on :8001.
#             `evalkit run numerics` on :8000 twice and on :8001, `numerics-chat` on both; `evalkit gate` for each
#             pair (issue 28). Run dirs -> $OUT/numerics-runs.tgz, gates -> $OUT/gates.tgz.
#             LEAN=1 leaves out the second run on :8000 (lease 8 measured that pair: bit-identical).
#   speed     on :8000 (:8001 idle beside it): benchmarks/bench_loglikelihood.py (1,000 4-choice questions,
#             concurrency 64, 5 rounds; issue 29) -> $OUT/loglikelihood.jsonl, then benchmarks/bench_gsm8k.py, the
#             raw sweep against evalkit's whole command, ROUNDS (3) rounds at the raw concurrencies RAW
#             (64,128,256,512; 512 the best in lease 6 and on 2026-12-04) -> $OUT/bench.json (issue 26).
#   fp8       an online-FP8 server (--quantization fp8) on :8002; `numerics` and `numerics-chat` on it and their
#             gates against bf16 (issue 28); GSM8K with --goodput/--cost-per-gpu-hour/--gpus-billed on :8000 and
#             :8002 and their gate under a goodput/cost policy; examples/sweeps/h200-recommend.yaml over the three
#             servers (issue 30) -> $OUT/fp8-runs.tgz, $OUT/cost-runs.tgz, $OUT/gates-fp8.tgz.
#   serve     every server stopped; `evalkit run gsm8k --serve` with --goodput and --cost-per-gpu-hour (GPU count
#             from the server evalkit started) -> $OUT/serve-run.tgz (issue 30).
set -uo pipefail
. benchmarks/gpu/device_env.sh
W=/root/work; mkdir -p $W
ek() { python3 -m evalkit.cli "$@"; }
economics() {  # summary.json: prints the gsm8k speed figures on goodput, cost and energy
  python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['tasks']['gsm8k']['speed']
print({k: v for k, v in s.items() if any(w in k for w in ('goodput', 'cost', 'joule', 'power', 'energy', 'output_tokens_per_s'))})" "$1"
}
timed() {  # label, command... : prints the command's exit code and wall seconds
  local label=$1 t0=$SECONDS; shift
  "$@"; local rc=$?
  echo "== $label: exit $rc, $((SECONDS - t0)) s"
}
gates() {  # "baseline candidate" pairs of run dirs under $W/numerics
  mkdir -p $W/gates
  for pair in "$@"; do
    set -- $pair
    ek gate $W/numerics/$1 $W/numerics/$2 -o $W/gates/$1--$2 > $W/gates-$1--$2.txt 2>&1
    echo "== gate $1 vs $2: exit $?"
    grep -E "numerics|PASS|FAIL|CANNOT|verdict" $W/gates-$1--$2.txt | head -12
  done
}
case "${1:?numerics|speed|fp8|serve}" in
numerics)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import vllm, lm_eval, evalkit, pynvml; print('vllm', vllm.__version__, 'lm_eval', lm_eval.__version__)"
  up 8000
  up 8001
  grep -h "KV cache size" /root/srv-800[01].log | tail -2
  N=$W/numerics
  timed "numerics bf16 :8000 run 1" ek run numerics --endpoint http://127.0.0.1:8000/v1 -o $N/bf16-a1 --fresh -q
  [[ -z ${LEAN:-} ]] && timed "numerics bf16 :8000 run 2" ek run numerics --endpoint http://127.0.0.1:8000/v1 -o $N/bf16-a2 --fresh -q
  timed "numerics bf16 :8001" ek run numerics --endpoint http://127.0.0.1:8001/v1 -o $N/bf16-b --fresh -q
  timed "numerics-chat bf16 :8000" ek run numerics-chat --endpoint http://127.0.0.1:8000/v1 -o $N/chat-bf16-a --fresh -q
  timed "numerics-chat bf16 :8001" ek run numerics-chat --endpoint http://127.0.0.1:8001/v1 -o $N/chat-bf16-b --fresh -q
  tar czf $OUT/numerics-runs.tgz -C $W numerics
  gates "bf16-a1 bf16-b" "chat-bf16-a chat-bf16-b"
  [[ -z ${LEAN:-} ]] && gates "bf16-a1 bf16-a2"
  tar czf $OUT/gates.tgz -C $W gates $(cd $W && ls gates-*.txt)
  for p in 8000 8001; do cp /root/srv-$p.log $OUT/server-$p.log; done
  ;;
speed)
  curl -sf http://127.0.0.1:8000/health >/dev/null || up 8000
  python3 -m benchmarks.bench_loglikelihood --endpoint http://127.0.0.1:8000/v1 --docs 1000 --concurrency 64 \
    --rounds 5 2>&1 | grep -v Warning | tee $OUT/loglikelihood.jsonl
  python3 -m benchmarks.bench_gsm8k --endpoint http://127.0.0.1:8000/v1 --raw-concurrency ${RAW:-64,128,256,512} \
    --rounds ${ROUNDS:-3} --lm-eval none --out $OUT/bench.json 2>&1 | grep -v Warning
  ;;
fp8)
  up 8002 --quantization fp8
  N=$W/numerics
  timed "numerics fp8 :8002" ek run numerics --endpoint http://127.0.0.1:8002/v1 -o $N/fp8 --fresh -q
  timed "numerics-chat fp8 :8002" ek run numerics-chat --endpoint http://127.0.0.1:8002/v1 -o $N/chat-fp8 --fresh -q
  tar czf $OUT/fp8-runs.tgz -C $W numerics/fp8 numerics/chat-fp8
  gates "bf16-a1 fp8" "chat-bf16-a chat-fp8"
  C=$W/cost
  for spec in "bf16:8000" "fp8:8002"; do
    name=${spec%%:*}; port=${spec#*:}
    timed "gsm8k $name with goodput and cost" ek run gsm8k --endpoint http://127.0.0.1:$port/v1 \
      --goodput ttft:200 --goodput tpot:20 --cost-per-gpu-hour 3.5 --gpus-billed 1 -o $C/$name --fresh -q
    economics $C/$name/summary.json
  done
  printf 'speed:\n  min_goodput_share: 0.9\n  max_goodput_drop: 0.10\n  max_cost_per_million_output_tokens: 1.0\n' > $W/cost-policy.yaml
  ek gate $C/bf16 $C/fp8 -p $W/cost-policy.yaml -o $W/gates/cost-bf16--fp8 > $W/gates-cost.txt 2>&1; echo "== gate cost bf16 vs fp8: exit $?"
  head -40 $W/gates-cost.txt
  tar czf $OUT/cost-runs.tgz -C $W cost cost-policy.yaml
  ek sweep examples/sweeps/h200-recommend.yaml -o $W/recommend > $W/recommend-stdout.txt 2>&1; echo "== sweep recommend: exit $?"
  tail -25 $W/recommend/sweep.md
  tar czf $OUT/recommend.tgz -C $W recommend recommend-stdout.txt
  tar czf $OUT/gates-fp8.tgz -C $W gates $(cd $W && ls gates-*.txt)
  cp /root/srv-8002.log $OUT/server-8002.log
  ;;
serve)
  pkill -f vllm.entrypoints.openai.api_server; sleep 10
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
  timed "gsm8k --serve with goodput and cost" ek run gsm8k --serve $M --served-model-name smollm2-135m \
    --gpu-memory-utilization 0.3 --max-num-seqs 256 --goodput ttft:200 --goodput tpot:20 \
    --cost-per-gpu-hour 3.5 --gpus 0 -o $W/serve --fresh -q
  economics $W/serve/summary.json
  tar czf $OUT/serve-run.tgz -C $W serve
  ;;
esac
