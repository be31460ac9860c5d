"""(c) Peak RSS of the evalkit process for a 20,000-sample run with 1,000-token responses.

    python -m benchmarks.bench_memory [--quick] [--num-samples 667] [--tokens-per-chunk 1] [--json PATH]

Runs the real CLI, ``python -m evalkit.cli run aime25 --num-samples 667 --max-tokens 1000 --concurrency 64
--no-report -q`` (30 problems x 667 = 20,010 requests), as a child process against the test server in
``--fast`` mode with every answer padded to 1,000 tokens (``--answer-tokens 1000``). The peak RSS is the
child's ``ru_maxrss`` from ``os.wait4`` (exact, kernel-kept high-water mark, the test server excluded; Linux reports
the largest of the CLI and the processes it started and waited for: the scoring process, math-verify's worker).
psutil also samples, every 0.25 s, the RSS of the CLI and of every process under it, summed (``tree``): evalkit
scores in a process of its own, so the bound applies to the sum. The samples also place the peak in the request
phase (samples.jsonl still growing) or after it (reading the store back, summary). PASS needs both the kernel's
high-water mark and the sampled tree peak within the bound.

``--tokens-per-chunk`` sets how many tokens the server puts in one SSE chunk. The default, 1, is how vLLM
streams (and the worst case for the client: evalkit keeps one inter-token-latency entry per chunk, ``itl_ms``,
so the stored record and what reading the store back costs grow with the chunk count); the full run takes
about 4 minutes on 2 cores. ``--tokens-per-chunk 20`` cuts the chunk count (still 1,000 tokens per response)
for a faster run. ``--quick`` (2,010 requests) only checks the pipeline: the 400 MB bound is for 20,010.

``--duration S --rate R`` measures the other bound, memory over time: ``evalkit run aime25 --request-rate R
--duration S`` (Poisson arrivals, enough samples per problem that the schedule outlasts ``S``, the test server's
own short answers unless ``--answer-tokens`` pads them), the tree's RSS sampled every 0.25 s, and its growth after
the first ``--settle`` seconds (default 300): the highest RSS after that point minus the RSS at it. Bound: growth
<= 50 MB for a one-hour run at 50 req/s (``--duration 3600 --rate 50``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from evalkit.testing.server import SubprocessServer

LIMIT_MB = 400.0
GROWTH_LIMIT_MB = 50.0
AIME_PROBLEMS = 30


def _tree_rss(proc: psutil.Process) -> tuple[int, int]:
    """RSS of ``proc`` alone and of ``proc`` plus every process under it."""
    own = proc.memory_info().rss
    total = own
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue  # exited meanwhile
    return own, total


def _poll(pid: int, samples_path: Path, out: list[tuple[float, int, int, int]], stop: threading.Event) -> None:
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return
    t0 = time.perf_counter()
    while not stop.is_set():
        try:
            rss, tree = _tree_rss(proc)
        except psutil.Error:
            return
        try:
            size = samples_path.stat().st_size
        except OSError:
            size = 0
        out.append((time.perf_counter() - t0, rss, size, tree))
        stop.wait(0.25)


def run_cli(
    url: str, num_samples: int, max_tokens: int, concurrency: int, workdir: Path, load: list[str] | None = None
) -> dict[str, Any]:
    """One ``evalkit run aime25`` child; its exact peak RSS, wall time and an RSS trace (``load``: more flags, e.g.
    ``--request-rate``/``--duration``, in place of ``--concurrency``)."""
    run_dir = workdir / "run"
    cmd = [
        sys.executable,
        "-m",
        "evalkit.cli",
        "run",
        "aime25",
        "--endpoint",
        url,
        "--num-samples",
        str(num_samples),
        "--max-tokens",
        str(max_tokens),
        *(load if load else ["--concurrency", str(concurrency)]),
        "--no-report",
        "-q",
        "-o",
        str(run_dir),
    ]
    log = open(workdir / "cli.log", "w+b")  # noqa: SIM115 - closed below
    trace: list[tuple[float, int, int, int]] = []
    stop = threading.Event()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    poller = threading.Thread(target=_poll, args=(proc.pid, run_dir / "samples.jsonl", trace, stop), daemon=True)
    poller.start()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (not the test server's)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    stop.set()
    poller.join(5)
    log.seek(0)
    output = log.read().decode("utf-8", "replace")
    log.close()
    if proc.returncode != 0:
        raise RuntimeError(f"evalkit run failed ({proc.returncode}):\n{output[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())["tasks"]["aime25"]
    samples_bytes = (run_dir / "samples.jsonl").stat().st_size
    # request phase: while samples.jsonl is still growing; after it: reading the store back, scoring summary
    during = [tree for _, _, size, tree in trace if size < samples_bytes]
    after = [tree for _, _, size, tree in trace if size >= samples_bytes]
    peak_t = max(trace, key=lambda x: x[3])[0] if trace else None
    return {
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: KiB; the largest single process of the tree
        "sampled_peak_cli_mb": round(max(r for _, r, _, _ in trace) / 1024**2, 1) if trace else None,
        "sampled_peak_tree_mb": round(max(t for *_, t in trace) / 1024**2, 1) if trace else None,
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "requests": summary["counts"]["total"],
        "api_errors": summary["counts"]["api_error"],
        "output_tokens_per_s": summary["speed"]["output_tokens_per_s"],
        "samples_jsonl_mb": round(samples_bytes / 1024**2, 1),
        "sampled_peak_request_phase_mb": round(max(during) / 1024**2, 1) if during else None,
        "sampled_peak_after_requests_mb": round(max(after) / 1024**2, 1) if after else None,
        "sampled_peak_at_s": round(peak_t, 1) if peak_t is not None else None,
        "tree_trace_mb": [(round(t, 2), round(tr / 1024**2, 1)) for t, _, _, tr in trace[::4]] if load else None,
        "trace_mb": [
            (round(t, 1), round(r / 1024**2, 1), round(tr / 1024**2, 1))
            for t, r, _, tr in trace[:: max(1, len(trace) // 40)]
        ],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=667, help="samples per AIME problem (30 problems)")
    ap.add_argument("--max-tokens", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--limit-mb", type=float, default=LIMIT_MB)
    ap.add_argument("--quick", action="store_true", help="67 samples per problem (2,010 requests)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--keep", default=None, help="keep the run dir and CLI log in this folder")
    ap.add_argument("--duration", type=float, default=None, help="seconds: measure RSS growth over a timed load run")
    ap.add_argument("--rate", type=float, default=50.0, help="with --duration: requests per second (Poisson)")
    ap.add_argument("--settle", type=float, default=300.0, help="with --duration: growth counts from this second")
    ap.add_argument("--answer-tokens", type=int, default=None, help="with --duration: pad answers to this many tokens")
    a = ap.parse_args(argv)
    if a.duration is not None:
        return main_duration(a)
    if a.quick:
        a.num_samples = min(a.num_samples, 67)
    n = AIME_PROBLEMS * a.num_samples
    print(
        f"(c) evalkit run aime25: {n:,} requests x {a.max_tokens} tokens, {a.tokens_per_chunk} token(s)/chunk, "
        f"concurrency {a.concurrency}",
        flush=True,
    )
    with SubprocessServer(
        "--fast",
        "--tokens-per-chunk",
        str(a.tokens_per_chunk),
        "--answer-tokens",
        str(a.max_tokens),
        "--max-model-len",
        str(a.max_tokens + 1024),
    ) as srv:
        if a.keep:
            Path(a.keep).mkdir(parents=True, exist_ok=True)
            r = run_cli(srv.url, a.num_samples, a.max_tokens, a.concurrency, Path(a.keep))
        else:
            with tempfile.TemporaryDirectory(prefix="evalkit-bench-mem-") as tmp:
                r = run_cli(srv.url, a.num_samples, a.max_tokens, a.concurrency, Path(tmp))
    r["config"] = {
        "num_samples": a.num_samples,
        "requests_expected": n,
        "max_tokens": a.max_tokens,
        "concurrency": a.concurrency,
        "tokens_per_chunk": a.tokens_per_chunk,
    }
    peak = max(r["peak_rss_mb"], r["sampled_peak_tree_mb"] or 0.0)
    r["pass"] = peak <= a.limit_mb and r["requests"] == n and r["api_errors"] == 0
    r["quick"] = n < 20_000
    print(
        f"peak RSS {r['peak_rss_mb']:.0f} MB (limit {a.limit_mb:.0f}) | wall {r['wall_s']:.0f} s | "
        f"CPU {r['cpu_s']:.0f} s | {r['requests']:,} requests, {r['api_errors']} errors | "
        f"{r['output_tokens_per_s']:,.0f} out tok/s | samples.jsonl {r['samples_jsonl_mb']:.0f} MB"
    )
    print(
        f"sampled RSS peak: {r['sampled_peak_cli_mb']} MB the CLI alone, {r['sampled_peak_tree_mb']} MB the CLI and "
        f"its scoring process together; the tree's: {r['sampled_peak_request_phase_mb']} MB while requests ran, "
        f"{r['sampled_peak_after_requests_mb']} MB after the last sample was written "
        f"(peak at {r['sampled_peak_at_s']} s of {r['wall_s']} s)"
    )
    note = f" (only {n:,} requests: the bound is for 20,010)" if r["quick"] else ""
    print(f"peak RSS <= {a.limit_mb:.0f} MB: {'PASS' if r['pass'] else 'FAIL'}{note}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)
    return r


def rss_growth(trace: list[tuple[float, float]], settle_s: float) -> tuple[float, float, float]:
    """From ``(seconds, tree RSS MB)`` samples: the RSS at ``settle_s``, the highest after it, and their difference."""
    after = [(t, mb) for t, mb in trace if t >= settle_s]
    if not after:
        raise ValueError(f"no RSS sample after {settle_s} s: the run ended before it settled")
    at_settle = after[0][1]
    peak = max(mb for _, mb in after)
    return at_settle, peak, peak - at_settle


def main_duration(a: argparse.Namespace) -> dict[str, Any]:
    """``--duration``: one timed ``evalkit run aime25 --request-rate`` and its RSS growth after ``--settle``."""
    per_problem = int(a.rate * a.duration * 1.2 / AIME_PROBLEMS) + 1  # the schedule outlasts the duration
    load = ["--request-rate", str(a.rate), "--duration", f"{a.duration:g}s"]
    print(f"evalkit run aime25 at {a.rate:g} req/s for {a.duration:g} s (RSS growth after {a.settle:g} s)", flush=True)
    server_args = ["--fast", "--max-model-len", str(a.max_tokens + 1024)]
    if a.answer_tokens:
        server_args += ["--answer-tokens", str(a.answer_tokens)]
    with SubprocessServer(*server_args) as srv, tempfile.TemporaryDirectory(prefix="evalkit-bench-mem-") as tmp:
        r = run_cli(srv.url, per_problem, a.max_tokens, 0, Path(a.keep or tmp), load=load)
    at_settle, peak, growth = rss_growth(r["tree_trace_mb"], a.settle)
    r.update(
        config={"rate": a.rate, "duration_s": a.duration, "settle_s": a.settle, "max_tokens": a.max_tokens},
        rss_at_settle_mb=at_settle,
        rss_peak_after_settle_mb=peak,
        rss_growth_mb=round(growth, 1),
        **{"pass": growth <= GROWTH_LIMIT_MB and r["api_errors"] == 0},
    )
    print(
        f"{r['requests']:,} requests, {r['api_errors']} errors, wall {r['wall_s']:.0f} s | tree RSS "
        f"{at_settle:.0f} MB at {a.settle:g} s, peak after {peak:.0f} MB: growth {growth:.1f} MB "
        f"(limit {GROWTH_LIMIT_MB:.0f}): {'PASS' if r['pass'] else 'FAIL'}"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)
    return r


if __name__ == "__main__":
    sys.exit(0 if main()["pass"] else 1)
