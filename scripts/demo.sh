#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# evalkit's README demo on a CPU-only machine: evalkit starts a real vLLM (CPU build) with SmolLM2-135M,
# runs GSM8K 5-shot on a few problems, stops the server and leaves a result store + HTML report.
#
# Usage: scripts/demo.sh            (or: make demo)
# Environment:
#   VENV         virtual environment to create or reuse      (default: .venv in the repo root)
#   MODEL_DIR    the SmolLM2 Hugging Face folder             (default: .cache/evalkit/models/smollm2-135m,
#                                                             or EVALKIT_VLLM_MODEL when set)
#   DEMO_LIMIT   GSM8K problems to run                       (default: 20)
#   DEMO_OUT     run directory                               (default: reports/demo-<time>)
#
# Steps (each skipped when its result already exists, so a second run only costs the evaluation):
#   1. scripts/setup_vllm_cpu.sh: CPU vLLM + the model (it finds the CPU torch on PyTorch's CPU index by itself)
#   2. pip install -e . into the same venv
#   3. evalkit run gsm8k --serve MODEL_DIR ...   (evalkit starts vLLM, evaluates, stops it)
# SmolLM2-135M scores ~0% on GSM8K: the demo shows the pipeline (server, accuracy, speed, report), not a
# good model.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
VENV="${VENV:-$REPO_ROOT/.venv}"
MODEL_DIR="${MODEL_DIR:-${EVALKIT_VLLM_MODEL:-$REPO_ROOT/.cache/evalkit/models/smollm2-135m}}"
LIMIT="${DEMO_LIMIT:-20}"
OUT="${DEMO_OUT:-reports/demo-$(date +%Y%m%d-%H%M%S)}"

T0=$SECONDS
say() { printf '[demo +%3ds] %s\n' "$((SECONDS - T0))" "$*"; }

# ---- 1. CPU vLLM + model ------------------------------------------------------------------------------
say "setting up the CPU vLLM and SmolLM2-135M (scripts/setup_vllm_cpu.sh; existing parts are kept)"
bash "$REPO_ROOT/scripts/setup_vllm_cpu.sh" "$VENV" "$MODEL_DIR"
PY="$VENV/bin/python"

# ---- 2. evalkit, editable, in the same venv --------------------------------------------------------------
# "installed from this checkout" = importing evalkit from outside the repo finds this repo's package
where=$(cd / && "$PY" -c 'import evalkit, pathlib; print(pathlib.Path(evalkit.__file__).resolve().parent.parent)' \
        2>/dev/null || true)
if [[ "$where" == "$REPO_ROOT" && -x "$VENV/bin/evalkit" ]]; then
    say "evalkit already installed from this checkout: pip install -e . skipped"
else
    say "pip install -e . into $VENV"
    "$PY" -m pip install --quiet -e "$REPO_ROOT"
fi

# ---- 3. let evalkit start vLLM and run GSM8K ---------------------------------------------------------------
cmd=("$VENV/bin/evalkit" run gsm8k
     --serve "$MODEL_DIR" --served-model-name smollm2-135m
     --enforce-eager --max-model-len 2048 --server-env VLLM_CPU_KVCACHE_SPACE=1
     # one rank: its worker in the engine core's process, one process fewer to start (vLLM's CPU platform takes
     # this executor only with V1 multiprocessing off)
     --server-arg=--distributed-executor-backend=uni --server-env VLLM_ENABLE_V1_MULTIPROCESSING=0
     --limit "$LIMIT" --output-dir "$OUT")
say "running: evalkit ${cmd[*]:1}"
set +e
HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "${cmd[@]}"
rc=$?
set -e

echo
if [[ -f "$OUT/summary.json" ]]; then
    say "done (exit code $rc). Result store: $OUT/"
    echo "    report:   $OUT/report.html"
    echo "    summary:  $OUT/summary.json   samples: $OUT/samples.jsonl   manifest: $OUT/manifest.json"
    echo "    vLLM log: $OUT/server.log"
else
    say "evalkit failed (exit code $rc); see the message above and $OUT/server.log"
fi
cat <<EOF

On a machine with NVIDIA GPUs (pip install 'evalkit[vllm]'), the same run with the model from the Hugging Face
Hub and a real sample size is:

    evalkit run gsm8k --serve HuggingFaceTB/SmolLM2-135M-Instruct --gpus 0 --limit 200

EOF
exit "$rc"
