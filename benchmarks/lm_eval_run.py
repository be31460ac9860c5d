"""lm-eval's own `local-completions` on evalkit's vendored GSM8K, as one timed command.

Prints one JSON line: wall time of the whole command (imports, task indexing, prompt building, requests,
scoring), the requests' share, and lm-eval's metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import time

T0 = time.perf_counter()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--endpoint", required=True, help="http://host:port/v1")
    ap.add_argument("--model", required=True)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--num-concurrent", type=int, default=1)
    ap.add_argument("--samples-out", default=None, help="write per-doc responses here (JSON)")
    a = ap.parse_args()
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tests.parity import per_doc, run_lm_eval  # lm-eval's own gsm8k config, data location changed only

    t_req = time.perf_counter()
    res = run_lm_eval(a.endpoint, a.model, a.limit, num_concurrent=a.num_concurrent)
    wall = time.perf_counter() - T0
    r = res["results"]["gsm8k"]
    out = {
        "wall_s": wall,
        "after_imports_s": time.perf_counter() - t_req,
        "num_concurrent": a.num_concurrent,
        "strict": r["exact_match,strict-match"],
        "flexible": r["exact_match,flexible-extract"],
    }
    if a.samples_out:
        with open(a.samples_out, "w") as f:
            json.dump(per_doc(res), f)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
