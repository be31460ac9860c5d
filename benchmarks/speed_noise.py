"""Run-to-run noise of speed figures and the false-fail rate of the gate's speed rules on identical configs.

    python -m benchmarks.speed_noise DIR [DIR ...] --json noise.json

Each DIR holds runs of one config (``DIR/*/summary.json``; the runs of a DIR are the same config run again). For
each DIR: every run's TTFT/TPOT p50 and p99 and output tokens/s, their spread (max/min, coefficient of variation
of the logs, the largest pairwise change); then, with evalkit's own gate (default policy), every ordered pair of
runs of the DIR gated one run per side, and every split into 3 vs 3 runs (when it holds six): how many speed
rules failed. With ``--compare A B`` also the gate's speed verdicts between the runs of DIR A and DIR B (3 vs 3,
and every one-run pair).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
from pathlib import Path
from typing import Any

from evalkit.gating import default_policy, evaluate, from_run_dir
from evalkit.gating.engine import combine_runs
from evalkit.store.reader import open_run

FIGURES = {  # name -> (summary.json speed key, percentile or None for a plain number)
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "tpot_p50_ms": ("tpot_ms", "p50"),
    "tpot_p99_ms": ("tpot_ms", "p99"),
    "output_tokens_per_s": ("output_tokens_per_s", None),
}


def run_dirs(folder: Path) -> list[Path]:
    return sorted(p.parent for p in folder.glob("*/summary.json"))


def figures(run_dir: Path) -> dict[str, float | None]:
    summary = open_run(run_dir, with_samples=False).summary
    task = next(iter(summary.get("tasks", {}).values()), {})
    speed = task.get("speed", {})
    out: dict[str, float | None] = {}
    for name, (key, q) in FIGURES.items():
        value = speed.get(key)
        out[name] = (value or {}).get(q) if q else value
    return out


def spread(values: list[float]) -> dict[str, float]:
    logs = [math.log(v) for v in values if v and v > 0]
    pairs = [b / a - 1 for a, b in itertools.permutations(values, 2) if a > 0]
    return {
        "min": min(values),
        "max": max(values),
        "max_over_min": max(values) / min(values) if min(values) > 0 else math.inf,
        "sd_log": statistics.stdev(logs) if len(logs) > 1 else 0.0,
        "largest_pair_change": max(pairs, key=abs) if pairs else 0.0,
    }


def speed_failures(base: list[Path], cand: list[Path]) -> list[str]:
    b = combine_runs("b", [from_run_dir(d) for d in base])
    c = combine_runs("c", [from_run_dir(d) for d in cand], "candidate")
    result = evaluate(b, c, default_policy(), force=True)
    return [r.name for r in result.rules if r.kind == "speed" and r.verdict == "fail"]


def analyse(folder: Path) -> dict[str, Any]:
    runs = run_dirs(folder)
    figs = {d.name: figures(d) for d in runs}
    out: dict[str, Any] = {"runs": figs, "spread": {}}
    for name in FIGURES:
        values = [f[name] for f in figs.values() if f[name] is not None]
        if len(values) > 1:
            out["spread"][name] = spread([float(v) for v in values])
    pairs = list(itertools.permutations(runs, 2))
    one = [speed_failures([a], [b]) for a, b in pairs]
    out["one_run_pairs"] = {
        "pairs": len(pairs),
        "failed": sum(1 for f in one if f),
        "rules": sorted({x for f in one for x in f}),
    }
    if len(runs) >= 6:
        splits = [(list(s), [r for r in runs[:6] if r not in s]) for s in itertools.combinations(runs[:6], 3)]
        three = [speed_failures(a, b) for a, b in splits]
        out["three_vs_three"] = {"splits": len(splits), "failed": sum(1 for f in three if f)}
    return out


def compare(a: Path, b: Path) -> dict[str, Any]:
    ra, rb = run_dirs(a), run_dirs(b)
    three = speed_failures(ra[:3], rb[:3]) if min(len(ra), len(rb)) >= 3 else None
    pairs = [speed_failures([x], [y]) for x in ra for y in rb]
    return {"three_vs_three_failed": three, "one_run_pairs": len(pairs), "one_run_failed": sum(1 for f in pairs if f)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--compare", nargs=2, type=Path, action="append", default=[])
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    out: dict[str, Any] = {str(d): analyse(d) for d in args.dirs}
    out["compare"] = {f"{a} vs {b}": compare(a, b) for a, b in args.compare}
    text = json.dumps(out, indent=1, default=str)
    if args.json:
        args.json.write_text(text)
    for d in args.dirs:
        res = out[str(d)]
        print(f"== {d}: {len(res['runs'])} runs")
        for name, s in res["spread"].items():
            print(f"  {name:22s} {s['min']:10.2f} .. {s['max']:10.2f}  max/min {s['max_over_min']:.3f}  "
                  f"sd(log) {s['sd_log']:.3f}  largest pair change {s['largest_pair_change']:+.1%}")  # fmt: skip
        print(f"  one run per side: {res['one_run_pairs']['failed']} of {res['one_run_pairs']['pairs']} pairs fail "
              f"speed {res['one_run_pairs']['rules']}")  # fmt: skip
        if "three_vs_three" in res:
            print(f"  3 vs 3: {res['three_vs_three']['failed']} of {res['three_vs_three']['splits']} splits fail speed")
    for k, v in out["compare"].items():
        print(f"== {k}: {v}")


if __name__ == "__main__":
    main()
