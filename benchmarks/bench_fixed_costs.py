"""Fixed costs of `evalkit run gsm8k` on the full test set (1319 prompts): everything but the requests.

    python -m benchmarks.bench_fixed_costs [--json FILE]

Against the test server in ``--fast`` mode (so requests take almost nothing), it times the whole command
(Python start, imports, prompt building or the prompt cache, scoring, writing the store) with a cold prompt
cache and then warm, and subtracts the request phase that the run itself measured (``speed.wall_s``). In the
same run it times lm-eval's own prompt building for the same task (``TaskManager`` index + ``build_all_requests``)
as the yardstick for the cold case. Targets: warm fixed costs < 3 s; cold no slower than lm-eval's own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def run_evalkit(url: str, out: Path, cache: Path, report: bool) -> tuple[float, float]:
    env = {**os.environ, "EVALKIT_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "evalkit.cli", "run", "gsm8k", "--endpoint", url, "-o", str(out), "--fresh", "-q"]
    if not report:
        cmd.append("--no-report")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    wall = time.perf_counter() - t0
    phase = json.loads((out / "summary.json").read_text())["tasks"]["gsm8k"]["speed"]["wall_s"]
    return wall, phase


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    res: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp, SubprocessServer("--fast") as srv:
        cache = Path(tmp) / "cache"
        rows = []
        for label, report in (("cold", False), ("warm", False), ("warm", False), ("warm + report", True)):
            wall, phase = run_evalkit(srv.url, Path(tmp) / "run", cache, report)
            rows.append({"case": label, "wall_s": wall, "request_phase_s": phase, "fixed_s": wall - phase})
            print(f"evalkit {label:<14} whole {wall:6.2f} s  requests {phase:5.2f} s  fixed {wall - phase:5.2f} s",
                  flush=True)
        p = subprocess.run([sys.executable, "-c", LM_EVAL_BUILD], capture_output=True, text=True, check=True,
                           env={**os.environ, "TQDM_DISABLE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})
        index_s, build_s = (float(x) for x in p.stdout.split())
        print(f"lm-eval own prompt building: TaskManager index {index_s:.2f} s + build_all_requests {build_s:.2f} s")
    warm = min(r["fixed_s"] for r in rows if r["case"] == "warm")
    cold = rows[0]["fixed_s"]
    res = {"rows": rows, "lm_eval_index_s": index_s, "lm_eval_build_s": build_s, "warm_fixed_s": warm,
           "cold_fixed_s": cold, "pass_warm": warm < 3.0, "pass_cold": cold <= index_s + build_s}
    print(f"warm fixed costs {warm:.2f} s (< 3 s: {'PASS' if res['pass_warm'] else 'FAIL'}); cold {cold:.2f} s vs "
          f"lm-eval's own {index_s + build_s:.2f} s ({'PASS' if res['pass_cold'] else 'FAIL'})")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    sys.exit(0 if res["pass_warm"] and res["pass_cold"] else 1)


if __name__ == "__main__":
    main()
