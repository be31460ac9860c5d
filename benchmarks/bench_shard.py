"""A sharded run's speed against one endpoint of the same kind, measured in one run.

    python -m benchmarks.bench_shard [--rounds 3] [--limit 300] [--concurrency 32] [--max-num-seqs 8] [--json FILE]

Starts three test servers as processes with the same settings (``--max-num-seqs`` running requests each, the rest
queued, ``--itl`` seconds between tokens: a replica of bounded capacity, as a vLLM instance is) and runs
``evalkit run gsm8k`` with the same ``--concurrency`` (the total in flight) against one of them and sharded over
two, interleaved for ``--rounds`` rounds after one warm-up run (the prompt cache). Prints each run's output
tokens/s (the run's own ``summary.json``), the sharded runs' split per endpoint, and the ratio of the medians,
sharded over single. With concurrency at least twice ``--max-num-seqs`` one server queues what two would run,
so the ratio is near 2 when the client is not the bottleneck.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from evalkit.testing.server import SubprocessServer


def run_once(urls: list[str], out: Path, a: argparse.Namespace) -> dict[str, Any]:
    """One ``evalkit run`` against ``urls``: its output tokens/s and, sharded, each endpoint's requests."""
    ends = [arg for url in urls for arg in ("--endpoint", url)]
    cmd = [sys.executable, "-m", "evalkit.cli", "run", "gsm8k", *ends, "--limit", str(a.limit),
           "--max-tokens", str(a.max_tokens), "--concurrency", str(a.concurrency), "-o", str(out), "--fresh",
           "--no-report", "-q"]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "TQDM_DISABLE": "1"})
    task = json.loads((out / "summary.json").read_text())["tasks"]["gsm8k"]
    split = {e["endpoint"]: e["counts"]["total"] for e in task.get("endpoints") or []}
    speed = task["speed"]
    return {"output_tok_s": speed["output_tokens_per_s"], "wall_s": speed["wall_s"], "split": split,
            "client_bound": speed["client_bound"]}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--limit", type=int, default=300)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--itl", type=float, default=0.01)
    p.add_argument("--ttft", type=float, default=0.05)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = p.parse_args()
    server_args = ["--itl", str(a.itl), "--ttft", str(a.ttft), "--max-num-seqs", str(a.max_num_seqs)]
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        one, two, three = (stack.enter_context(SubprocessServer(*server_args)).url for _ in range(3))
        run_once([three], Path(tmp) / "warmup", a)  # builds the prompt cache; not counted
        single, sharded = [], []
        for i in range(a.rounds):  # interleaved, so a drift of the machine's load hits both alike
            single.append(run_once([one], Path(tmp) / f"single{i}", a))
            sharded.append(run_once([one, two], Path(tmp) / f"sharded{i}", a))
    med_single = statistics.median(r["output_tok_s"] for r in single)
    med_sharded = statistics.median(r["output_tok_s"] for r in sharded)
    result = {
        "settings": {k: v for k, v in vars(a).items() if k != "json"},
        "single": single,
        "sharded": sharded,
        "median_output_tok_s": {"single": med_single, "sharded": med_sharded},
        "ratio": med_sharded / med_single,
    }
    for name, runs in (("single endpoint", single), ("two endpoints", sharded)):
        for r in runs:
            split = f"  split {list(r['split'].values())}" if r["split"] else ""
            bound = "  (client-bound)" if r["client_bound"] else ""
            print(f"{name:<16} {r['output_tok_s']:8.1f} output tok/s  {r['wall_s']:6.2f} s{split}{bound}")
    print(f"median output tok/s: single {med_single:.1f}, sharded over two {med_sharded:.1f}; "
          f"ratio {result['ratio']:.2f}")  # fmt: skip
    if a.json is not None:
        a.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
