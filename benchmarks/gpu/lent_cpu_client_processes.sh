#!/bin/bash
# On a lent GPU machine's 16 cores, without vLLM: issue 47's sender-process scaling (benchmarks/bench_client_processes.py,
# 1, 2 and 8 processes, 50,000 requests, 512 in flight, 6 `--fast` test servers, ROUNDS rounds, default 1) and the CPU
# per request of the run's own process by thread (benchmarks/bench_parent_cpu.py, 8 processes), for this tree and,
# when carried, a base tree beside it in the same call (the two interleaved: the same host's noise falls on both).
#
# Carry `.whl` (the wheels of evalkit's requirements the image lacks: see lent_cpu_whole_command.sh) and, for the
# comparison, `.gpu2/old.tar`, a `git archive --prefix=old/ BASE evalkit benchmarks tasks pyproject.toml` (bench
# files this tree has and the base lacks are copied into it). Output under $OUT: procs-{base,this}.json,
# parent-{base,this}.json and their logs.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site HF_DATASETS_OFFLINE=1 TQDM_DISABLE=1 PYTHONUNBUFFERED=1 EVALKIT_HISTORY_URL=off
trees=("this:$PWD")
if [[ -f .gpu2/old.tar ]]; then
  tar -xf .gpu2/old.tar -C /tmp && cp -n benchmarks/bench_parent_cpu.py /tmp/old/benchmarks/ && trees=("base:/tmp/old" "${trees[@]}")
fi
python3 -m compileall -q -j 0 /tmp/site "$PWD"/evalkit "$PWD"/benchmarks /tmp/old/evalkit /tmp/old/benchmarks > /dev/null 2>&1
echo "cpus $(nproc); $(lscpu | grep -m1 'Model name'); python $(python3 -V 2>&1)"
bench() {  # name, module, args...: the module from each tree, one after the other
  local name=$1; shift
  for t in "${trees[@]}"; do
    (cd "${t#*:}" && PYTHONPATH=$PWD:$PYTHONPATH python3 -m "$@" --json "$OUT/$name-${t%%:*}.json") \
      > "$OUT/$name-${t%%:*}.log" 2>&1
    echo "== $name ${t%%:*}"; tail -${TAIL:-8} "$OUT/$name-${t%%:*}.log"
  done
}
bench procs benchmarks.bench_client_processes --processes 1,2,8 --servers 6 --num-prompts 50000 --concurrency 512 --rounds "${ROUNDS:-1}"
TAIL=14 bench parent benchmarks.bench_parent_cpu --processes 8 --sizes 20000,60000 --rounds 2
