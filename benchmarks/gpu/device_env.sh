# Sourced by every benchmarks/gpu script on the lent machine, from the repository root, after ../shared/gpu's
# receive.sh printed READY: the carried vLLM and packages on the path, the hub off, evalkit's prompt cache kept
# between calls, bytecode compiled as `pip install` compiles it, and the helpers that start a vLLM server and
# wait for it.
#
# The lent machine sets PYTHONDONTWRITEBYTECODE=1 and the bundle is installed with --no-compile: without the
# compileall below every process compiles each module it imports from source, every time, a cost that falls on
# whichever side of a comparison imports more (evalkit, not a bare client; docs/benchmarks/archive/gpu-leases.md, H200 lease 9).
# compileall writes the .pyc files whatever that variable says and recompiles only what changed.
. /root/stash/s/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH HF_DATASETS_OFFLINE=1 TQDM_DISABLE=1 PYTHONUNBUFFERED=1
export EVALKIT_CACHE_DIR=/root/evalkit-cache
M=/root/models/smollm2-135m  # the model every script serves
python3 -m compileall -q -j 0 /root/site /root/vsite "$PWD/evalkit" "$PWD/benchmarks" "$PWD/tasks" > /dev/null 2>&1 \
  || echo "compileall failed: imports compile from source in this call" >&2

start_server() {  # port, extra vLLM flags...: SmolLM2-135M in dev mode, 0.3 of the GPU, log /root/srv-PORT.log
  local port=$1; shift
  VLLM_SERVER_DEV_MODE=1 setsid python3 -m vllm.entrypoints.openai.api_server --model $M \
    --served-model-name smollm2-135m --port "$port" --max-num-seqs 256 --gpu-memory-utilization 0.3 "$@" \
    > /root/srv-$port.log 2>&1 < /dev/null &
}
wait_healthy() {  # port [log]: 0 once /health answers (400 s at most), else the log's tail and 3
  for _ in $(seq 1 400); do curl -sf http://127.0.0.1:$1/health >/dev/null && return 0; sleep 1; done
  tail -30 "${2:-/root/srv-$1.log}"; return 3
}
up() {  # port, extra flags...: starts a server there and waits until it answers
  start_server "$@"; wait_healthy "$1" || exit 3; echo ":$1 healthy at ${SECONDS} s"
}
