"""A multiple-choice (loglikelihood) ``lm-eval:NAME`` task's request phase against a bare client on a live server.

The task (written here: ``--docs`` questions of 4 choices, lm-eval's YAML by ``--include-path``) is run by
``evalkit.run``; the bare client sends the very same bodies (evalkit's own ``Client.payload`` of the task's
requests: ``echo``, ``logprobs: 1``, ``max_tokens: 1``, token ids) with a plain aiohttp loop, non-streamed, at the
same concurrency, and reads each JSON answer. Rounds alternate (bare, evalkit, ...) after one bare warm-up round
(the server's prefix cache then holds every prompt for both). Prints one JSON line per round and the medians::

    python -m benchmarks.bench_loglikelihood --endpoint http://127.0.0.1:8000/v1 --docs 200 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp


def write_task(folder: Path, docs: int) -> None:
    rows = [
        {"question": f"Which number comes after {i}?", "choices": [str(i + k) for k in (2, 1, 3, 0)], "label": 1}
        for i in range(docs)
    ]
    (folder / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "bench_mc.yaml").write_text(
        "task: bench_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {folder / 'bench.jsonl'}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_target: label\ndoc_to_choice: "{{choices}}"\n'
        "metric_list:\n  - metric: acc\nmetadata:\n  version: 1.0\n"
    )


async def bare(url: str, bodies: list[dict[str, Any]], concurrency: int) -> float:
    """Wall seconds to send every body (``concurrency`` in flight) and parse each JSON answer."""
    sem = asyncio.Semaphore(concurrency)

    async def one(session: aiohttp.ClientSession, body: dict[str, Any]) -> None:
        async with sem, session.post(url, json=body) as resp:
            resp.raise_for_status()
            json.loads(await resp.read())

    t0 = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(one(session, b) for b in bodies))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    import evalkit
    from evalkit.client.http_client import Client
    from evalkit.client.model_discovery import list_models, resolve_model
    from evalkit.tasks.lmeval_source import expand_lm_eval_tasks
    from evalkit.tasks.registry import Registry
    from evalkit.tasks.spec import TaskSettings

    folder = Path(tempfile.mkdtemp(prefix="bench-ll-"))
    write_task(folder, a.docs)
    names, generated = expand_lm_eval_tasks(["lm-eval:bench_mc"], [folder])
    assert generated is not None
    task = Registry([generated]).get(names[0])
    task.use_endpoint(a.endpoint, None)
    model = resolve_model(list_models(a.endpoint, None), None, a.endpoint).id
    requests = task.build_requests(TaskSettings())
    client = Client(a.endpoint, model)
    bodies = [client.payload(r) for r in requests]
    url = a.endpoint.rstrip("/") + "/completions"
    asyncio.run(bare(url, bodies, a.concurrency))  # warm-up: every prompt in the server's prefix cache
    bare_s, evalkit_s = [], []
    for i in range(a.rounds):
        bare_s.append(asyncio.run(bare(url, bodies, a.concurrency)))
        out = folder / f"run-{i}"
        result = evalkit.run(
            names, endpoint=a.endpoint, include_path=[folder], concurrency=str(a.concurrency), output_dir=out,
            fresh=True, report=False, warmup=0,
        )  # fmt: skip
        speed = result.summary.tasks[names[0]].speed
        evalkit_s.append(speed.wall_s)
        print(json.dumps({"round": i, "requests": len(bodies), "bare_s": round(bare_s[-1], 3),
                          "evalkit_request_phase_s": round(speed.wall_s, 3),
                          "evalkit_prompt_tok_s": round((speed.total_tokens_per_s or 0)
                                                        - (speed.output_tokens_per_s or 0), 1)}))  # fmt: skip
    b, e = statistics.median(bare_s), statistics.median(evalkit_s)
    print(json.dumps({"requests": len(bodies), "concurrency": a.concurrency, "bare_median_s": round(b, 3),
                      "evalkit_median_s": round(e, 3), "ratio": round(e / b, 3)}))  # fmt: skip


if __name__ == "__main__":
    main()
