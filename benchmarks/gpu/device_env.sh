# Sourced by every benchmarks/gpu script on the lent machine, from the repository root, after ../shared/gpu's
# receive.sh printed READY: the carried vLLM and packages on the path, the hub off, evalkit's prompt cache kept
# between calls, and bytecode compiled as `pip install` compiles it.
#
# The lent machine sets PYTHONDONTWRITEBYTECODE=1 and the bundle is installed with --no-compile, so without the
# compileall below every process compiles each module it imports from source, every time: `import sqlalchemy.orm`
# took 1.17-1.64 s there, 0.32-0.42 s once compiled (BENCHMARKS.md, 2026-12-05). evalkit imports more than a bare
# client does, so that cost lands on its side of every whole-command comparison. compileall writes the .pyc files
# whatever that variable says, and recompiles only what changed (about 6 s the first time, 16 cores).
. /root/stash/s/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH HF_DATASETS_OFFLINE=1 TQDM_DISABLE=1 PYTHONUNBUFFERED=1
export EVALKIT_CACHE_DIR=/root/evalkit-cache
python3 -m compileall -q -j 0 /root/site /root/vsite "$PWD/evalkit" "$PWD/benchmarks" "$PWD/tasks" > /dev/null 2>&1 || true
