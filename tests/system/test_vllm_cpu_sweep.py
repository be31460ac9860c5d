"""The CPU layout sweep in CI: ``examples/sweeps/cpu-layouts.yaml`` (SmolLM2-135M on the CPU build of vLLM as
tp1, tp3 and dp2, 2 documents each of GSM8K and the numerics task at one fixed concurrency), each server started
once with its config's own flags (``max_num_seqs`` 4 on tp1, 8 on dp2, none on tp3: in that server's argv only);
its table, comparison report, per-engine /metrics of dp2, tp3's three worker processes and their thread binding,
no vLLM process left after each server (the normal end of a multi-rank layout), and the gate between layouts
(accuracy paired, speed, numerics against tp1's noise floor). ``pytest -s`` prints the figures
(docs/benchmarks/archive/cpu-vllm-layouts.md records them).

Two controls make the numerics comparable on every CI machine: one request in flight (the example's level is 4)
and tp1 on one core, as each dp2 engine is. On a CPU whose bf16 kernels depend on the batch and on the thread
count (Intel AMX), a batched run's own noise floor read top-1 98.4%, mean KL 7.8e-4, beyond the gate's budgets
(it rightly cannot decide), and dp2 against a two-thread tp1 read top-1 99.5%, mean KL 3.0e-4; with both
controls dp2 is bit-identical to tp1 there too (docs/benchmarks/archive/numerics.md, "CPU vLLM numerics on an Intel
AMX machine")."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.system.test_vllm_e2e import cli_env, launched_port, vllm_pids
from tests.vllm_env import IN_PROCESS_WORKER_ARGS, IN_PROCESS_WORKER_ENV, MODEL_DIR, REPO, VLLM_MARKS

pytestmark = VLLM_MARKS
LAYOUTS = ("tp1", "tp3", "dp2")
LIMIT = 2  # documents of each task (the example's 8): one request at a time; a GSM8K document takes 8 s on tp1 and
# 21 s on tp3 here (a 1,000-token 5-shot prompt), so 4 documents cost the test 100 s more and assert nothing more
LEVEL = 1  # requests in flight: each computed alone, so that numerics has a reproducible baseline on any CPU
# three servers one after the other: ~250 s alone on 2 cores, more on a slower machine, so the sweep gets more than
# pytest's 600 s per test
SWEEP_TIMEOUT_S = 1800


def evalkit(*args: str, mark: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "evalkit.cli", *args]
    env = {**cli_env(), "EVALKIT_TEST_MARK": mark}
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def processes_marked(mark: str) -> set[int]:
    """Live processes whose environment holds ``EVALKIT_TEST_MARK=mark``: what this test's evalkit started and
    everything those started (vLLM's API server, ``VLLM::EngineCore_DP0``, ``VLLM::Worker`` ... inherit it),
    whatever process group they are in, and nothing else on the machine."""
    needle = f"EVALKIT_TEST_MARK={mark}".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                found.add(int(entry))
    return found


@pytest.mark.timeout(SWEEP_TIMEOUT_S)
def test_cpu_layout_sweep_table_report_and_gates(tmp_path: Path) -> None:
    spec = yaml.safe_load((REPO / "examples/sweeps/cpu-layouts.yaml").read_text())
    spec["server"]["model"] = str(MODEL_DIR)
    spec["concurrency"] = [LEVEL]
    spec["limit"] = LIMIT
    spec["warmup"] = 0  # 2 requests a task: no speed figure is judged, and each warm-up is one more generation
    spec["configs"]["tp1"] = {"cpu_threads_bind": str(min(os.sched_getaffinity(0)))}  # one core, as a dp2 engine
    spec["configs"]["tp1"]["max_num_seqs"] = 4  # a config's server flags reach its vLLM (and no other's)
    # tp1's one worker in its engine core's process: one process fewer to start (tests/vllm_env.py)
    spec["configs"]["tp1"]["extra_args"] = list(IN_PROCESS_WORKER_ARGS)
    spec["configs"]["tp1"]["env"] = {**spec["server"]["env"], **IN_PROCESS_WORKER_ENV}
    spec["configs"]["dp2"]["max_num_seqs"] = 8
    sweep_file, out = tmp_path / "cpu-layouts.yaml", tmp_path / "sweep"
    sweep_file.write_text(yaml.safe_dump(spec, sort_keys=False))  # the file's order: tp1 is "first"
    mark = str(tmp_path)
    t0 = time.monotonic()
    p = evalkit("sweep", str(sweep_file), "-o", str(out), mark=mark, timeout=SWEEP_TIMEOUT_S)
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-3000:]

    for layout in LAYOUTS:  # every server of the sweep stopped, its whole group with it
        port = launched_port(out / "servers" / layout / "server.log")
        assert port is not None and vllm_pids(port) == [], layout
    time.sleep(1)  # the last server's group was signalled before evalkit exited; give the kernel a moment to reap
    assert processes_marked(mark) == set(), "processes the sweep started (vLLM engines, workers) outlived it"
    rows = {r["config"]: r for r in csv.DictReader((out / "sweep.csv").open())}
    assert tuple(rows) == LAYOUTS
    assert all(not r.get("error") for r in rows.values()), rows
    assert (out / "sweep.md").is_file() and (out / "compare.html").is_file()
    assert float(rows["tp1"]["numerics top1 vs first"]) == 1.0  # tp1 is the reference
    assert float(rows["tp3"]["numerics mean_kl vs first"]) > 0  # TP changes the order of reductions
    for layout in LAYOUTS:
        assert rows[layout]["numerics mean_kl floor"] != ""

    runs = {layout: out / "runs" / f"{layout}__default__c{LEVEL}" for layout in LAYOUTS}
    startups = {}
    for layout, run in runs.items():
        server = json.loads((run / "manifest.json").read_text())["server"]
        startups[layout] = server["startup_s"]
        assert server["env_overrides"]["VLLM_CPU_OMP_THREADS_BIND"] and server["vllm_version"]
        argv = server["argv"]
        seqs = argv[argv.index("--max-num-seqs") + 1] if "--max-num-seqs" in argv else None
        assert seqs == {"tp1": "4", "dp2": "8"}.get(layout), (layout, argv)
        assert float(rows[layout]["output_tok_s"]) > 0
    # tp3: three ranks, each its own worker process, their threads bound by "spread" (rank r on CPU r mod n)
    tp3 = json.loads((runs["tp3"] / "manifest.json").read_text())["server"]
    assert tp3["argv"][tp3["argv"].index("--tensor-parallel-size") + 1] == "3"
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) <= 3:
        assert tp3["env_overrides"]["VLLM_CPU_OMP_THREADS_BIND"] == "|".join(str(cpus[r % len(cpus)]) for r in range(3))
    log = (out / "servers" / "tp3" / "server.log").read_text(errors="replace")
    ranks = dict(re.findall(r"pid=(\d+)\).*\bworld_size=3 rank=(\d)\b", log))
    assert sorted(ranks.values()) == ["0", "1", "2"], ranks  # three worker processes, one rank each
    dp2 = json.loads((runs["dp2"] / "summary.json").read_text())["tasks"]["gsm8k"]["server"]
    assert sorted(dp2["engines"]) == ["0", "1"]
    assert sum(e["requests"] for e in dp2["engines"].values()) == dp2["requests"]["total"] >= LIMIT
    assert sum(e["prompt_tokens"] for e in dp2["engines"].values()) == dp2["prompt_tokens"]

    verdicts, rules = {}, {}
    for layout in ("tp3", "dp2"):
        g = evalkit(
            "gate", str(runs["tp1"]), str(runs[layout]), "-o", str(tmp_path / f"gate-{layout}"), mark=mark, timeout=120
        )
        gate = json.loads((tmp_path / f"gate-{layout}" / "gate.json").read_text())
        assert g.returncode == {"pass": 0, "fail": 1, "cannot_decide": 2}[gate["verdict"]], g.stderr
        verdicts[layout] = gate["verdict"]
        rules[layout] = {r["name"]: r["verdict"] for r in gate["rules"]}
        accuracy = [r["verdict"] for r in gate["rules"] if r["kind"] == "accuracy"]
        numerics = [r["verdict"] for r in gate["rules"] if r["task"] == "numerics" and "error rate" not in r["name"]]
        assert accuracy and numerics and "skip" not in numerics, rules[layout]  # paired accuracy and numerics judged
    assert verdicts["dp2"] == "pass"  # data parallel: each engine computes as tp1 does
    cols = ("numerics top1 vs first", "numerics mean_kl vs first", "numerics p99_kl vs first", "numerics mean_kl floor")
    print(f"\n[cpu sweep] wall {wall:.0f} s; server start {startups}; gate verdicts vs tp1 {verdicts}; {rules}")
    for layout in LAYOUTS:
        r = rows[layout]
        print(f"  {layout}: " + ", ".join(f"{k}={r.get(k)}" for k in ("output_tok_s", *cols)))
    print((out / "sweep.md").read_text())
