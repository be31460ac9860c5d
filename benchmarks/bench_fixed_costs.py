"""Fixed costs of `evalkit run gsm8k` on the full test set (1319 prompts): everything but the requests.

    python -m benchmarks.bench_fixed_costs [--json FILE] [--rounds N] [--endpoint URL] [--code DIR] [--cases ...]

Against the test server in ``--fast`` mode (so requests take almost nothing), or a live server with
``--endpoint``, it times the whole command (Python start, imports, prompt building or the prompt cache, scoring,
writing the store) with a cold prompt cache and then warm, and subtracts the request phase that the run itself
measured (``speed.wall_s``). In the same run it times lm-eval's own prompt building for the same task
(``TaskManager`` index + ``build_all_requests``) as the yardstick for the cold case. Targets: warm fixed costs
< 3 s; cold no slower than lm-eval's own.

Each run also gives when its first request went out, in seconds after the command started (the phases the run
timed before its request phase, plus the first request's start within it). With a cold cache evalkit streams the
prompts as lm-eval builds them, so the first request goes out long before the build ends, and the request phase
absorbs the rest of the build (the cold "fixed" figure shrinks accordingly: compare whole commands, cold against
warm, for what a cold cache costs). ``--code DIR`` runs the same cases, interleaved, with the evalkit of another
checkout (e.g. ``git worktree add /tmp/old COMMIT``) for a before/after in one run; ``--rounds`` repeats every
case and reports medians. Against a live vLLM started with ``VLLM_SERVER_DEV_MODE=1`` the prefix cache is reset
before every run. ``--cases warm`` (or ``cold``, ``report``, ``render``) runs only those cases.

The report's own cost, two ways: the ``report`` case (a warm run that writes report.html) gives the run's
``report`` phase, and the ``render`` case times the whole ``evalkit report RUN_DIR`` command on the full-set run
dir the round's runs left (one uncounted ``--no-report`` run makes it when no other case did). With ``--code``
both are printed as ratios, the other checkout's median over this one's.

Each run's phases come from its summary's ``timings_s`` (``startup``: interpreter, imports and settings, then
``setup``, ``prompts``, the warm-up, the request phase's lap and ``TASK.scoring_summary``, the tail after the last
answer), plus ``exit_s``: the whole command less all of those (console output and the process's exit); the medians
of the warm runs are printed per phase, for each code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from evalkit.testing.server import SubprocessServer

LM_EVAL_BUILD = """
import time, os
t0 = time.perf_counter()
from lm_eval.tasks import TaskManager
from tests.parity import lm_eval_gsm8k_config
tm = TaskManager()
t1 = time.perf_counter()
task = list(tm.load([lm_eval_gsm8k_config()])["tasks"].values())[0]
task.set_fewshot_seed(seed=1234)
task.build_all_requests(limit=None)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


BEFORE_REQUESTS = ("server_start", "setup", "prompts", "resume_check", "gsm8k.before_requests")


def first_request_s(out: Path) -> float | None:
    """Seconds from the command's start to its first request: the laps before the request phase (process start-up
    included) plus the earliest request start within the phase."""
    t = json.loads((out / "summary.json").read_text())["timings_s"]
    starts = [json.loads(line).get("start_s") for line in (out / "samples.jsonl").read_bytes().splitlines()]
    starts = [x for x in starts if x is not None]
    if t.get("startup") is None or not starts:
        return None
    return float(t["startup"] + sum(t.get(k) or 0.0 for k in BEFORE_REQUESTS) + min(starts))


def reset_prefix_cache(url: str) -> None:
    root = url.rstrip("/").removesuffix("/v1")
    with contextlib.suppress(OSError):  # not a dev-mode vLLM (or the test server, which has no prefix cache)
        urllib.request.urlopen(urllib.request.Request(root + "/reset_prefix_cache", method="POST"), timeout=10)


def run_evalkit(url: str, out: Path, cache: Path, report: bool, code: Path | None) -> dict[str, Any]:
    env = {**os.environ, "EVALKIT_CACHE_DIR": str(cache)}
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "evalkit.cli", "run", "gsm8k", "--endpoint", url, "-o", str(out), "--fresh", "-q"]
    if not report:
        cmd.append("--no-report")
    reset_prefix_cache(url)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, capture_output=True, cwd=code)
    wall = time.perf_counter() - t0
    summary = json.loads((out / "summary.json").read_text())
    phase = summary["tasks"]["gsm8k"]["speed"]["wall_s"]
    timings = summary.get("timings_s") or {}
    streamed = json.loads((out / "manifest.json").read_text())["tasks"]["gsm8k"].get("prompts_streamed")
    return {
        "wall_s": wall,
        "request_phase_s": phase,
        "fixed_s": wall - phase,
        "first_request_s": first_request_s(out),
        "prompts_streamed": streamed,
        "timings_s": timings,
        "exit_s": wall - sum(v or 0.0 for v in timings.values()),
    }


def run_report_command(run_dir: Path, out: Path, code: Path | None) -> dict[str, Any]:
    """``evalkit report run_dir -o out``, timed as a whole command."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "evalkit.cli", "report", str(run_dir), "-o", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, capture_output=True, cwd=code)
    return {"wall_s": time.perf_counter() - t0, "report_bytes": out.stat().st_size}


def report_medians(rows: list[dict[str, Any]], codes: list[str]) -> dict[str, dict[str, float | None]]:
    """Per code: the median ``evalkit report`` command and the median ``report`` phase of runs that wrote one;
    with a second code, its medians over this checkout's as ``ratio_*``."""
    out: dict[str, dict[str, float | None]] = {}
    for name in codes:
        phase = [
            {"s": r["timings_s"].get("report")} for r in rows if r["code"] == name and r["case"] == "warm + report"
        ]
        command = [r for r in rows if r["code"] == name and r["case"] == "report command"]
        out[name] = {"report_command_s": _median(command, "wall_s"), "report_phase_s": _median(phase, "s")}
    if len(codes) == 2:
        this, other = out[codes[0]], out[codes[1]]
        for key in ("report_command_s", "report_phase_s"):
            a, b = this[key], other[key]
            out[codes[1]][f"ratio_{key}"] = round(b / a, 2) if a and b else None
    return out


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--endpoint", default=None, help="a live server (http://host:port/v1) instead of the test server")
    ap.add_argument("--rounds", type=int, default=1, help="repeat every case; medians are reported")
    ap.add_argument("--code", default=None, help="also run each case with the evalkit of this checkout")
    ap.add_argument(
        "--cases", nargs="+", choices=("cold", "warm", "report", "render"), default=["cold", "warm", "report", "render"]
    )
    a = ap.parse_args()
    codes: list[tuple[str, Path | None]] = [("this", None)]
    if a.code:
        codes.append((Path(a.code).name, Path(a.code).resolve()))
    all_cases = (
        ("cold", False, "cold"),
        ("warm", False, "warm"),
        ("warm", False, "warm"),
        ("warm + report", True, "report"),
    )
    cases = [(label, report) for label, report, kind in all_cases if kind in a.cases]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        url = a.endpoint or stack.enter_context(SubprocessServer("--fast")).url
        cold_case = "cold" in a.cases  # else each code's prompt cache is filled once, by a run not counted
        for name, code in codes if not cold_case else ():
            run_evalkit(url, Path(tmp) / "run", Path(tmp) / f"cache-{name}", False, code)
        for rnd in range(a.rounds):
            for name, code in codes:
                cache = Path(tmp) / (f"cache-{name}-{rnd}" if cold_case else f"cache-{name}")
                for label, report in cases:
                    row = {
                        "code": name,
                        "round": rnd,
                        "case": label,
                        **run_evalkit(url, Path(tmp) / "run", cache, report, code),
                    }
                    rows.append(row)
                    first = row["first_request_s"]
                    print(
                        f"evalkit[{name}] {label:<14} whole {row['wall_s']:6.2f} s  requests "
                        f"{row['request_phase_s']:5.2f} s  fixed {row['fixed_s']:5.2f} s  first request at "
                        f"{'-' if first is None else f'{first:5.2f}'} s  streamed {row['prompts_streamed']}",
                        flush=True,
                    )
                if "render" in a.cases:
                    run_dir = Path(tmp) / "run"
                    if not (run_dir / "summary.json").is_file():
                        run_evalkit(url, run_dir, cache, False, code)
                    row = {"code": name, "round": rnd, "case": "report command"}
                    row.update(run_report_command(run_dir, Path(tmp) / "report.html", code))
                    rows.append(row)
                    print(f"evalkit[{name}] report command whole {row['wall_s']:6.2f} s", flush=True)
        index_s = build_s = 0.0  # the yardstick of the cold case
        if cold_case:
            p = subprocess.run(
                [sys.executable, "-c", LM_EVAL_BUILD],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "TQDM_DISABLE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
            )
            index_s, build_s = (float(x) for x in p.stdout.split())
            print(f"lm-eval own prompt building: index {index_s:.2f} s + build_all_requests {build_s:.2f} s")
    medians: dict[str, dict[str, Any]] = {}
    phases: dict[str, dict[str, float]] = {}
    for name, _ in codes:
        warm_rows = [r for r in rows if r["code"] == name and r["case"] == "warm"]
        keys = list(dict.fromkeys(k for r in warm_rows for k in r["timings_s"]))
        if warm_rows:  # every warm run's phases (both of each round)
            phases[name] = {
                k: round(statistics.median([r["timings_s"].get(k) or 0.0 for r in warm_rows]), 3)
                for k in [*keys, "exit_s"]
            }
            phases[name]["exit_s"] = round(statistics.median([r["exit_s"] for r in warm_rows]), 3)
        for label in ("cold", "warm", "warm + report"):
            sel = [r for r in rows if r["code"] == name and r["case"] == label]
            if not sel:
                continue
            if label == "warm":  # the better of each round's two warm runs
                sel = [min((r for r in sel if r["round"] == k), key=lambda r: r["fixed_s"]) for k in range(a.rounds)]
            medians[f"{name}/{label}"] = {
                k: _median(sel, k) for k in ("wall_s", "request_phase_s", "fixed_s", "first_request_s")
            }
    warm, cold = medians.get("this/warm"), medians.get("this/cold")
    res: dict[str, Any] = {
        "rows": rows,
        "medians": medians,
        "report": report_medians(rows, [n for n, _ in codes]),
        "phases_warm": phases,
        "lm_eval_index_s": index_s if cold_case else None,
        "lm_eval_build_s": build_s if cold_case else None,
        "warm_fixed_s": warm and warm["fixed_s"],
        "cold_fixed_s": cold and cold["fixed_s"],
        "cold_extra_wall_s": round(cold["wall_s"] - warm["wall_s"], 3) if warm and cold else None,
        "pass_warm": warm is None or warm["fixed_s"] < 3.0,
        "pass_cold": cold is None or cold["fixed_s"] <= index_s + build_s,
    }
    for key, m in medians.items():
        print(
            f"median {key:<22} whole {m['wall_s']:6.2f} s  requests {m['request_phase_s']:5.2f} s  fixed "
            f"{m['fixed_s']:5.2f} s  first request at {m['first_request_s']} s"
        )
    for name, medians_by_phase in phases.items():
        shown = ", ".join(f"{k} {v:.3f}" for k, v in medians_by_phase.items())
        print(f"median phases of {name}'s warm runs: {shown}")
    for name, m in res["report"].items():
        print(f"report of {name}: " + ", ".join(f"{k} {v}" for k, v in m.items()))
    if warm is not None:
        print(f"warm fixed costs {warm['fixed_s']:.2f} s (< 3 s: {'PASS' if res['pass_warm'] else 'FAIL'})")
    if cold is not None and warm is not None:
        print(
            f"cold {cold['fixed_s']:.2f} s vs lm-eval's own {index_s + build_s:.2f} s "
            f"({'PASS' if res['pass_cold'] else 'FAIL'}); a cold cache adds {res['cold_extra_wall_s']:.2f} s to the "
            "whole command"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    sys.exit(0 if res["pass_warm"] and res["pass_cold"] else 1)


if __name__ == "__main__":
    main()
