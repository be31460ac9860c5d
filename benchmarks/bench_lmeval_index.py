"""What resolving an ``lm-eval:NAME`` task costs before its first request: lm-eval's own ``TaskManager()`` (which
parses every task YAML it ships) against evalkit's ``task_manager()`` reading the kept index of those tasks
(evalkit/tasks/lmeval_source.py ``bundled_task_index``), and against evalkit's with no kept index yet (it indexes
as lm-eval does and writes the file).

    python -m benchmarks.bench_lmeval_index [--rounds 5] [--json FILE]

Each case runs in a fresh Python process (imports included, as a run pays them), the three cases interleaved in
each round; the cold case gets an empty evalkit cache folder, the warm one a cache the first round made. Prints the
medians of each case's wall time and the ratios warm / lm-eval's own and cold / lm-eval's own, and checks in every
round that evalkit's index holds the same task names as lm-eval's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CASES = {
    "lm-eval's own": """
import time; t0 = time.perf_counter()
from lm_eval.tasks import TaskManager
tm = TaskManager()
print(time.perf_counter() - t0, len(tm.all_tasks))
""",
    "evalkit, kept index": """
import time; t0 = time.perf_counter()
from evalkit.tasks.lmeval_source import task_manager
tm = task_manager(())
print(time.perf_counter() - t0, len(tm.all_tasks))
""",
}
CASES["evalkit, no kept index"] = CASES["evalkit, kept index"]


def _once(case: str, cache: Path) -> tuple[float, int]:
    env = {**os.environ, "EVALKIT_CACHE_DIR": str(cache), "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", CASES[case]], env=env, capture_output=True, text=True, check=True)
    seconds, names = out.stdout.split()[-2:]
    return float(seconds), int(names)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args()
    times: dict[str, list[float]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory(prefix="bench-lmeval-index-") as tmp:
        kept = Path(tmp) / "kept"
        _once("evalkit, kept index", kept)  # makes the kept index the warm case reads
        for i in range(args.rounds):
            names = set()
            for case in CASES:
                cache = kept if case == "evalkit, kept index" else Path(tmp) / f"cold-{i}"
                seconds, count = _once(case, cache)
                times[case].append(seconds)
                names.add(count)
            assert len(names) == 1, f"round {i}: the three indexes hold different numbers of names: {names}"
    med = {case: statistics.median(v) for case, v in times.items()}
    own = med["lm-eval's own"]
    for case, value in med.items():
        print(f"{case:24s} median {value:6.2f} s  ({', '.join(f'{t:.2f}' for t in times[case])})")
    print(f"kept index / lm-eval's own: {med['evalkit, kept index'] / own:.3f}")
    print(f"no kept index / lm-eval's own: {med['evalkit, no kept index'] / own:.3f}")
    if args.json:
        result: dict[str, Any] = {"rounds": args.rounds, "seconds": times, "median_s": med}
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
