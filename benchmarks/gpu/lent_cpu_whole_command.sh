#!/bin/bash
# On a lent GPU machine, without vLLM: `evalkit run gsm8k` as a whole command against a bare streaming client
# (benchmarks/bench_gsm8k.py, issue 26), both against evalkit's test server shaped like lease 9's vLLM on the H200
# (SmolLM2-135M, max-num-seqs 256: a gold GSM8K answer a request, one token a chunk, every request slower in
# proportion past 80 running, so throughput stays flat as vLLM's did). It measures evalkit's fixed costs (start-up,
# imports, setup, warm-up, scoring, exit) on the lent machine's CPUs and Python in one call, without the carrying
# calls and server start that real vLLM needs there (../shared/gpu/README.md). Figures: docs/benchmarks.md.
#
# Carry `.whl`: the wheels of evalkit's requirements that the machine's image lacks, made here with
#   python3 -m pip install --dry-run --ignore-installed --quiet --report /tmp/report.json -e .
#   (the report's packages less ../shared/gpu/device-packages.txt, fetched with `pip download --no-deps` for
#   cp312 manylinux, or built with `pip wheel` where only an sdist exists)
# and run `bash benchmarks/gpu/lent_cpu_whole_command.sh` from the repository root. ROUNDS (5) and RAW (256,512)
# as in the H200 scripts. Output: $OUT/bench.json (bench_gsm8k's figures), $OUT/bench.log, $OUT/server.log.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [[ -d .whl ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=$PWD:/tmp/site
fi
export HF_DATASETS_OFFLINE=1 TQDM_DISABLE=1 PYTHONUNBUFFERED=1 EVALKIT_CACHE_DIR=${EVALKIT_CACHE_DIR:-/tmp/evalkit-cache}
# the lent machine sets PYTHONDONTWRITEBYTECODE=1 and pip ran with --no-compile: compile as `pip install` does
python3 -m compileall -q -j 0 ${PYTHONPATH:+/tmp/site} evalkit benchmarks tasks > /dev/null 2>&1 || echo "compileall failed" >&2
echo "cpus $(nproc); $(lscpu | grep -m1 'Model name'); $(nvidia-smi -L 2>/dev/null | head -1)"
python3 -c "import sys, lm_eval, evalkit.cli; print('python', sys.version.split()[0], 'lm_eval', lm_eval.__version__)" || exit 3
touch "$OUT/server.log"
setsid python3 -m evalkit.testing.server --port 8000 --max-num-seqs 256 --batch-knee 80 --ttft 0.05 --itl 0.009 \
  --correct-ratio 0.3 > "$OUT/server.log" 2>&1 < /dev/null &
for _ in $(seq 1 120); do grep -q ready "$OUT/server.log" && break; sleep 0.5; done
python3 -m benchmarks.bench_gsm8k --endpoint http://127.0.0.1:8000/v1 --raw-concurrency "${RAW:-256,512}" \
  --rounds "${ROUNDS:-5}" --lm-eval none --out "$OUT/bench.json" 2>&1 | grep -v Warning | tee "$OUT/bench.log"
