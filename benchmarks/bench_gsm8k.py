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
        ek_wall, _ = timed([sys.executable, "-m", "evalkit.cli", "run", "gsm8k", "--endpoint", base, "--limit",
                            str(limit), "--concurrency", "1", "-o", f"{tmp}/ek", "--no-report", "-q"])
        fresh()
        lm_wall, out = timed([sys.executable, "-m", "benchmarks.lm_eval_run", "--endpoint", base, "--model", model,
                              "--num-concurrent", "1", "--limit", str(limit), "--samples-out", f"{tmp}/lm.json"])
        lm = {int(k): v for k, v in json.loads(Path(f"{tmp}/lm.json").read_text()).items()}
        ek = evalkit_per_doc(Path(f"{tmp}/ek"))
        summary = json.loads(Path(f"{tmp}/ek/summary.json").read_text())["tasks"]["gsm8k"]["metrics"]
    lm_res = json.loads(out.strip().splitlines()[-1])
    same = {k: sum(ek[d][k] == lm[d][k] for d in lm) for k in ("prompt", "response", "filtered", "metrics")}
    r = {
        "docs": limit, "same": same, "identical": all(v == limit for v in same.values()),
        "evalkit": {"wall_s": ek_wall, "strict": summary["exact_match,strict-match"]["value"],
                    "flexible": summary["exact_match,flexible-extract"]["value"]},
        "lm_eval": {"wall_s": lm_wall, "strict": lm_res["strict"], "flexible": lm_res["flexible"]},
    }
    print(f"parity (c=1, {limit} docs): identical={r['identical']} same={same} "
          f"evalkit strict={r['evalkit']['strict']:.4f} ({ek_wall:.1f} s) "
          f"lm-eval strict={r['lm_eval']['strict']:.4f} ({lm_wall:.1f} s)", flush=True)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--raw-concurrency", default="16,64,128,256,512")
    ap.add_argument("--lm-eval-default", action="store_true", help="also lm-eval at num_concurrent=1 (slow)")
    ap.add_argument("--evalkit-args", default="", help="extra args for evalkit run")
    ap.add_argument("--parity-limit", type=int, default=0,
                    help="also run evalkit and lm-eval one request at a time on this many docs and compare")
    ap.add_argument("--out", default=None, help="write all numbers here as JSON")
    a = ap.parse_args()
    base = a.endpoint.rstrip("/")
    root = base[:-3] if base.endswith("/v1") else base
    model = served_model(base)
    bodies = gsm8k_bodies(model, a.limit)
    can_reset = reset_prefix_cache(root)
    res: dict[str, Any] = {"requests": len(bodies), "model": model, "prefix_cache_reset": can_reset}
    if not can_reset:  # compare warm runs only
        asyncio.run(run(base + "/completions", bodies, 64))

    def fresh() -> None:
        if can_reset:
            reset_prefix_cache(root)

    raw = []
    for c in (int(x) for x in a.raw_concurrency.split(",")):
        fresh()
        r = asyncio.run(run(base + "/completions", bodies, c))
        raw.append(r)
        print(f"raw c={c:<4} {r['wall_s']:7.2f} s  {r['output_tokens'] / r['wall_s']:9.0f} tok/s", flush=True)
    best = min(raw, key=lambda r: r["wall_s"])
    res["raw"] = raw
    res["raw_best"] = best

    with tempfile.TemporaryDirectory() as tmp:
        fresh()
        limit = ["--limit", str(a.limit)] if a.limit else []
        cmd = [sys.executable, "-m", "evalkit.cli", "run", "gsm8k", "--endpoint", base, "-o", f"{tmp}/ek",
               "--no-report", "-q", *limit, *a.evalkit_args.split()]
        wall, _ = timed(cmd)
        summary = json.loads(Path(f"{tmp}/ek/summary.json").read_text())["tasks"]["gsm8k"]
        res["evalkit"] = {"wall_s": wall, "request_phase_s": summary["speed"]["wall_s"],
                          "concurrency": summary["speed"]["concurrency"],
                          "strict": summary["metrics"]["exact_match,strict-match"]["value"]}
        print(f"evalkit      {wall:7.2f} s  (requests {summary['speed']['wall_s']:.2f} s, "
              f"concurrency {summary['speed']['concurrency']})", flush=True)

    lm_runs = [best["concurrency"]] + ([1] if a.lm_eval_default else [])
    res["lm_eval"] = []
    for c in lm_runs:
        fresh()
        limit = ["--limit", str(a.limit)] if a.limit else []
        wall, out = timed([sys.executable, "-m", "benchmarks.lm_eval_run", "--endpoint", base, "--model", model,
                           "--num-concurrent", str(c), *limit])
        r = json.loads(out.strip().splitlines()[-1])
        res["lm_eval"].append(r)
        print(f"lm-eval c={c:<4} {r['wall_s']:7.2f} s  strict={r['strict']:.4f}", flush=True)

    if a.parity_limit:
        res["parity"] = parity(base, model, a.parity_limit, fresh)

    ek = res["evalkit"]
    print("\nratios (lower is better for evalkit):")
    print(f"  evalkit command / best raw          {ek['wall_s'] / best['wall_s']:.2f}")
    print(f"  evalkit request phase / best raw    {ek['request_phase_s'] / best['wall_s']:.2f}")
    for r in res["lm_eval"]:
        print(f"  evalkit command / lm-eval c={r['num_concurrent']:<4}  {ek['wall_s'] / r['wall_s']:.3f}")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
