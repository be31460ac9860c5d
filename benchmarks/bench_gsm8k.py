"""(b) GSM8K wall time on one live vLLM, side by side in one run, printed as ratios.

    python -m benchmarks.bench_gsm8k --endpoint http://127.0.0.1:8000/v1 [--limit N] [--lm-eval-default]

Measures, each from the same prefix-cache state (``POST /reset_prefix_cache`` before every run; the server
must run with ``VLLM_SERVER_DEV_MODE=1``, else every run is measured warm after one warm-up pass):
  - a raw aiohttp client at fixed concurrencies (best one kept),
  - ``evalkit run gsm8k`` at its defaults (``--concurrency auto``), as a whole command and its request phase,
  - lm-eval's own ``local-completions`` at the best raw concurrency and (``--lm-eval-default``) at its default
    ``num_concurrent=1``, as whole commands.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.raw_client import gsm8k_bodies, run


def reset_prefix_cache(root: str) -> bool:
    req = urllib.request.Request(root + "/reset_prefix_cache", data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status == 200
    except OSError:
        return False


def served_model(base: str) -> str:
    with urllib.request.urlopen(base + "/models", timeout=30) as r:
        return str(json.load(r)["data"][0]["id"])


def timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return wall, p.stdout


def parity(base: str, model: str, limit: int, fresh: Any) -> dict[str, Any]:
    """evalkit and lm-eval local-completions, one request at a time on the first ``limit`` docs: same answers?"""
    from tests.parity import evalkit_per_doc

    with tempfile.TemporaryDirectory() as tmp:
        fresh()
        ek_wall, _ = timed(
            [
                sys.executable,
                "-m",
                "evalkit.cli",
                "run",
                "gsm8k",
                "--endpoint",
                base,
                "--limit",
                str(limit),
                "--concurrency",
                "1",
                "-o",
                f"{tmp}/ek",
                "--no-report",
                "-q",
            ]
        )
        fresh()
        lm_wall, out = timed(
            [
                sys.executable,
                "-m",
                "benchmarks.lm_eval_run",
                "--endpoint",
                base,
                "--model",
                model,
                "--num-concurrent",
                "1",
                "--limit",
                str(limit),
                "--samples-out",
                f"{tmp}/lm.json",
            ]
        )
        lm = {int(k): v for k, v in json.loads(Path(f"{tmp}/lm.json").read_text()).items()}
        ek = evalkit_per_doc(Path(f"{tmp}/ek"))
        summary = json.loads(Path(f"{tmp}/ek/summary.json").read_text())["tasks"]["gsm8k"]["metrics"]
    lm_res = json.loads(out.strip().splitlines()[-1])
    same = {k: sum(ek[d][k] == lm[d][k] for d in lm) for k in ("prompt", "response", "filtered", "metrics")}
    r = {
        "docs": limit,
        "same": same,
        "identical": all(v == limit for v in same.values()),
        "evalkit": {
            "wall_s": ek_wall,
            "strict": summary["exact_match,strict-match"]["value"],
            "flexible": summary["exact_match,flexible-extract"]["value"],
        },
        "lm_eval": {"wall_s": lm_wall, "strict": lm_res["strict"], "flexible": lm_res["flexible"]},
    }
    print(
        f"parity (c=1, {limit} docs): identical={r['identical']} same={same} "
        f"evalkit strict={r['evalkit']['strict']:.4f} ({ek_wall:.1f} s) "
        f"lm-eval strict={r['lm_eval']['strict']:.4f} ({lm_wall:.1f} s)",
        flush=True,
    )
    return r


def evalkit_run(base: str, limit: int | None, extra: list[str], tmp: str) -> dict[str, Any]:
    """``evalkit run gsm8k`` as a whole command: its wall time, request phase, and where the rest went."""
    lim = ["--limit", str(limit)] if limit else []
    cmd = [
        sys.executable,
        "-m",
        "evalkit.cli",
        "run",
        "gsm8k",
        "--endpoint",
        base,
        "-o",
        f"{tmp}/ek",
        "--fresh",
        "--no-report",
        "-q",
        *lim,
        *extra,
    ]
    wall, _ = timed(cmd)
    summary = json.loads(Path(f"{tmp}/ek/summary.json").read_text())
    t = summary["tasks"]["gsm8k"]
    return {
        "wall_s": wall,
        "request_phase_s": t["speed"]["wall_s"],
        "concurrency": t["speed"]["concurrency"],
        "strict": t["metrics"]["exact_match,strict-match"]["value"],
        "args": extra,
        "client_cpu_s": t["speed"]["client_cpu_s"],
        "loop_lag_ms_p99": t["speed"]["loop_lag_ms_p99"],
        "output_tokens_per_s": t["speed"]["output_tokens_per_s"],
        "timings_s": summary.get("timings_s"),
        "concurrency_trace": t["concurrency_trace"],
        "concurrency_levels": t.get("concurrency_levels"),
    }


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--raw-concurrency", default="16,64,128,256,512")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat the raw sweep and evalkit this many times, interleaved; medians are compared",
    )
    ap.add_argument(
        "--evalkit-fixed",
        type=int,
        default=None,
        help="also run evalkit at this fixed concurrency each round (its client vs the raw one)",
    )
    ap.add_argument(
        "--lm-eval",
        choices=["best", "default", "both", "none"],
        default="best",
        help="lm-eval local-completions at the best raw concurrency, at its default (1), or both",
    )
    ap.add_argument("--lm-eval-default", action="store_true", help="same as --lm-eval both")
    ap.add_argument("--evalkit-args", default="", help="extra args for evalkit run")
    ap.add_argument(
        "--parity-limit",
        type=int,
        default=0,
        help="also run evalkit and lm-eval one request at a time on this many docs and compare",
    )
    ap.add_argument("--out", default=None, help="write all numbers here as JSON")
    a = ap.parse_args()
    if a.lm_eval_default:
        a.lm_eval = "both"
    base = a.endpoint.rstrip("/")
    root = base[:-3] if base.endswith("/v1") else base
    model = served_model(base)
    bodies = gsm8k_bodies(model, a.limit)
    can_reset = reset_prefix_cache(root)
    res: dict[str, Any] = {
        "requests": len(bodies),
        "model": model,
        "prefix_cache_reset": can_reset,
        "rounds": a.rounds,
        "raw": [],
        "evalkit_runs": [],
        "evalkit_fixed_runs": [],
    }
    # one pass first, thrown away: whichever run came first would otherwise pay the server's first-request costs
    # (and without a prefix-cache reset every run is then measured warm)
    warm = asyncio.run(run(base + "/completions", bodies, 64))
    print(f"warm-up pass (not counted): {warm['wall_s']:.2f} s", flush=True)

    def fresh() -> None:
        if can_reset:
            reset_prefix_cache(root)

    levels = [int(x) for x in a.raw_concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            for c in levels:
                fresh()
                r = asyncio.run(run(base + "/completions", bodies, c))
                r["round"] = rnd
                res["raw"].append(r)
                print(
                    f"[{rnd}] raw c={c:<4} {r['wall_s']:7.2f} s  {r['output_tokens']} tokens, {r['events']} events",
                    flush=True,
                )
            fresh()
            ek = evalkit_run(base, a.limit, a.evalkit_args.split(), tmp)
            res["evalkit_runs"].append(ek)
            print(
                f"[{rnd}] evalkit      {ek['wall_s']:7.2f} s  (requests {ek['request_phase_s']:.2f} s, concurrency "
                f"{ek['concurrency']}, trace {ek['concurrency_trace']}, phases {ek['timings_s']})",
                flush=True,
            )
            if a.evalkit_fixed:
                fresh()
                ekf = evalkit_run(base, a.limit, [*a.evalkit_args.split(), "--concurrency", str(a.evalkit_fixed)], tmp)
                res["evalkit_fixed_runs"].append(ekf)
                print(
                    f"[{rnd}] evalkit c={a.evalkit_fixed:<4} {ekf['wall_s']:7.2f} s  "
                    f"(requests {ekf['request_phase_s']:.2f} s)",
                    flush=True,
                )

    by_c = {c: median([r["wall_s"] for r in res["raw"] if r["concurrency"] == c]) for c in levels}
    best_c = min(by_c, key=lambda c: by_c[c])
    best = {"concurrency": best_c, "wall_s": by_c[best_c]}
    res["raw_median_by_concurrency"] = by_c
    res["raw_best"] = best
    res["raw_best_single"] = min(res["raw"], key=lambda r: r["wall_s"])
    ek = {
        "wall_s": median([r["wall_s"] for r in res["evalkit_runs"]]),
        "request_phase_s": median([r["request_phase_s"] for r in res["evalkit_runs"]]),
    }
    res["evalkit"] = ek

    lm_runs = {"best": [best_c], "default": [1], "both": [best_c, 1], "none": []}[a.lm_eval]
    res["lm_eval"] = []
    for c in lm_runs:
        fresh()
        limit = ["--limit", str(a.limit)] if a.limit else []
        _, out = timed(
            [
                sys.executable,
                "-m",
                "benchmarks.lm_eval_run",
                "--endpoint",
                base,
                "--model",
                model,
                "--num-concurrent",
                str(c),
                *limit,
            ]
        )
        r = json.loads(out.strip().splitlines()[-1])
        res["lm_eval"].append(r)
        print(f"lm-eval c={c:<4} {r['wall_s']:7.2f} s  strict={r['strict']:.4f}", flush=True)

    if a.parity_limit:
        res["parity"] = parity(base, model, a.parity_limit, fresh)

    n = a.rounds
    print(
        f"\nraw client, median of {n} per concurrency: "
        + ", ".join(f"c={c} {w:.2f} s" for c, w in by_c.items())
        + f"; best c={best_c}"
    )
    print(
        f"evalkit at defaults, median of {n}: command {ek['wall_s']:.2f} s, request phase {ek['request_phase_s']:.2f} s"
    )
    print("ratios (lower is better for evalkit):")
    print(f"  evalkit command / best raw          {ek['wall_s'] / best['wall_s']:.2f}")
    print(f"  evalkit request phase / best raw    {ek['request_phase_s'] / best['wall_s']:.2f}")
    if res["evalkit_fixed_runs"]:
        fixed = median([r["request_phase_s"] for r in res["evalkit_fixed_runs"]])
        raw_same = median([r["wall_s"] for r in res["raw"] if r["concurrency"] == a.evalkit_fixed] or [float("nan")])
        print(f"  evalkit c={a.evalkit_fixed} request phase / raw c={a.evalkit_fixed}  {fixed / raw_same:.2f}")
    for r in res["lm_eval"]:
        print(f"  evalkit command / lm-eval c={r['num_concurrent']:<4}  {ek['wall_s'] / r['wall_s']:.3f}")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
