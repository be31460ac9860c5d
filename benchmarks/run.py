"""All local benchmarks in one command, each in its own process, then a summary of the ratios.

    python -m benchmarks.run [--quick] [--endpoint URL] [--out DIR] [--only cpu,fixed,memory,gsm8k]

- (a) :mod:`benchmarks.bench_client_cpu`: client CPU per streamed token, evalkit / plain aiohttp (<= 1.5).
- (c) :mod:`benchmarks.bench_memory`: peak RSS of ``evalkit run`` for 20,010 x 1,000-token responses (<= 400 MB).
- (b') :mod:`benchmarks.bench_fixed_costs`: evalkit's fixed costs for 1319 GSM8K prompts (warm < 3 s).
- (b) :mod:`benchmarks.bench_gsm8k`: GSM8K wall time against a live vLLM, only with ``--endpoint URL``.

``--quick`` runs smaller versions (a: 80 requests, 2 rounds, completions; c: 2,010 requests, which checks the
pipeline but not the 20,010-request bound; b: 200 docs). The full run takes about 9 minutes on 2 cores.
Exit status 1 when a pass/fail bound is missed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _run(module: str, args: list[str]) -> int:
    cmd = [sys.executable, "-m", module, *args]
    print(f"\n=== {' '.join(shlex.quote(c) for c in cmd)}", flush=True)
    t0 = time.perf_counter()
    rc = subprocess.call(cmd)
    print(f"=== {module}: exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
    return rc


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller versions of every benchmark")
    ap.add_argument("--endpoint", default=None, help="a live vLLM (http://host:port/v1): also run (b) GSM8K")
    ap.add_argument("--only", default="cpu,fixed,memory,gsm8k", help="subset of cpu,fixed,memory,gsm8k")
    ap.add_argument("--out", default=None, help="keep each benchmark's JSON in this folder")
    ap.add_argument("--cpu-args", default="", help="extra args for bench_client_cpu")
    ap.add_argument("--memory-args", default="", help="extra args for bench_memory, e.g. '--tokens-per-chunk 1'")
    ap.add_argument("--gsm8k-args", default="", help="extra args for bench_gsm8k")
    a = ap.parse_args(argv)
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    quick = ["--quick"] if a.quick else []
    tmp = tempfile.TemporaryDirectory(prefix="evalkit-bench-")
    out = Path(a.out) if a.out else Path(tmp.name)
    out.mkdir(parents=True, exist_ok=True)
    rcs: dict[str, int] = {}

    if "cpu" in only:
        rcs["cpu"] = _run(
            "benchmarks.bench_client_cpu", [*quick, "--json", str(out / "client_cpu.json"), *shlex.split(a.cpu_args)]
        )
    if "fixed" in only:
        rcs["fixed"] = _run("benchmarks.bench_fixed_costs", ["--json", str(out / "fixed.json")])
    if "memory" in only:
        rcs["memory"] = _run(
            "benchmarks.bench_memory", [*quick, "--json", str(out / "memory.json"), *shlex.split(a.memory_args)]
        )
    if "gsm8k" in only and a.endpoint:
        limit = ["--limit", "200"] if a.quick else []
        rcs["gsm8k"] = _run(
            "benchmarks.bench_gsm8k",
            ["--endpoint", a.endpoint, *limit, "--out", str(out / "gsm8k.json"), *shlex.split(a.gsm8k_args)],
        )

    ok = all(rc == 0 for rc in rcs.values())
    print("\n================ summary ================")
    cpu = _load(out / "client_cpu.json") if "cpu" in rcs else None
    if cpu:
        for kind, res in cpu["kinds"].items():
            line = [f"(a) {kind:<12} evalkit/plain {res['evalkit']['ratio_to_plain']:.2f} (<= 1.5)"]
            for name in ("plain-oj", "execute", "sdk"):
                if name in res:
                    line.append(f"{name}/plain {res[name]['ratio_to_plain']:.2f}")
            line.append(f"plain {res['plain']['tokens_per_cpu_s']:,.0f} tok/CPU-s")
            print("  ".join(line))
        print(f"(a) {'PASS' if cpu['pass'] else 'FAIL'}")
    elif "cpu" in rcs:
        print("(a) no result (see the output above)")
    fixed = _load(out / "fixed.json") if "fixed" in rcs else None
    if fixed:
        print(
            f"(b') fixed costs, 1319 GSM8K prompts: warm {fixed['warm_fixed_s']:.2f} s (< 3), cold "
            f"{fixed['cold_fixed_s']:.2f} s vs lm-eval's own prompt building "
            f"{fixed['lm_eval_index_s'] + fixed['lm_eval_build_s']:.2f} s"
        )
    mem = _load(out / "memory.json") if "memory" in rcs else None
    if mem:
        c = mem["config"]
        note = " (quick: not the 20,010-request bound)" if mem.get("quick") else ""
        print(
            f"(c) peak RSS {mem['peak_rss_mb']:.0f} MB (<= 400) for {mem['requests']:,} requests x "
            f"{c['max_tokens']} tokens, {c['tokens_per_chunk']} token(s)/chunk; wall {mem['wall_s']:.0f} s; "
            f"{'PASS' if mem['pass'] else 'FAIL'}{note}"
        )
    elif "memory" in rcs:
        print("(c) no result (see the output above)")
    gsm = _load(out / "gsm8k.json") if "gsm8k" in rcs else None
    if gsm:
        best = gsm["raw_best"]["wall_s"]
        ek = gsm["evalkit"]
        line = [f"(b) evalkit/best raw {ek['wall_s'] / best:.2f} (request phase {ek['request_phase_s'] / best:.2f})"]
        for r in gsm.get("lm_eval", []):
            line.append(f"evalkit/lm-eval c={r['num_concurrent']} {ek['wall_s'] / r['wall_s']:.2f}")
        print("  ".join(line))
    elif "gsm8k" in only and not a.endpoint:
        print("(b) skipped: needs --endpoint URL of a live vLLM")
    if a.out:
        print(f"JSON in {out}")
    tmp.cleanup()
    print("ALL PASS" if ok else "SOME FAILED: " + ", ".join(k for k, rc in rcs.items() if rc != 0))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
