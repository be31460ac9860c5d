"""Synthetic run directories that follow the result-store contract (``evalkit/contracts/``).

Used by ``tests/unit/test_report.py`` and ``tests/system/test_report_browser.py``; nothing here touches the network.

- :func:`build_gsm8k_run`: 1319 completions samples with a shared 5-shot prefix (~3000-char prompts),
  a few api_error / truncated / no_answer / empty samples, server metrics and GPU memory.
- :func:`build_aime_run`: 30 problems x 16 chat samples with 30,000-char responses and reasoning.
- :func:`build_minimal_run`: an old/partial run with most keys missing and a torn last line in samples.jsonl.
- ``hostile=True`` plants model output that tries to break out of the HTML (see :data:`HOSTILE`).
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from evalkit.contracts import STATUSES

CANARY = "</script><script>window.__pwned=1</script>"
IMG = "<img src=x onerror=alert(1)>"
JINJA_EXPR = "{{ 7*7 }}"
JINJA_RAW = "{% raw %}"
HOSTILE = f"{CANARY} {IMG} {JINJA_EXPR} {JINJA_RAW} <b>bold?</b> & \"quoted\" 'single'"
LONG_LINE_LEN = 200_000

_WORD_TEXT = (
    "the of and to in is that for it as with was on be by this are we from at an or have not which "
    "let so then thus therefore since because number sum product square root prime factor divide "
    "multiply add subtract equation solve value integer remainder modulo triangle circle angle area "
    "length side point line probability count ways choose case check wait hmm consider suppose"
)
_WORDS = _WORD_TEXT.split()


def sample_data(text: str) -> dict[str, Any]:
    """The decoded sample list of a run report."""
    m = re.search(r'<script type="application/gzip" id="samples-data">(.*?)</script>', text, re.DOTALL)
    assert m, "no sample data in the report"
    data = json.loads(gzip.decompress(base64.b64decode(m.group(1))))
    assert isinstance(data, dict)
    return data


def text_of(t: Any) -> str:
    """A stored text: a string, or [head, tail, omitted, total] when it was cut."""
    return t if isinstance(t, str) else t[0] + t[1]


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False), encoding="utf-8")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("wb") as f:
        for row in rows:
            f.write(orjson.dumps(row))
            f.write(b"\n")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _percentiles(values: list[float]) -> dict[str, Any]:
    return {
        "mean": sum(values) / len(values) if values else None,
        "p50": _pct(values, 0.5),
        "p90": _pct(values, 0.9),
        "p99": _pct(values, 0.99),
        "n": len(values),
    }


def _metric(flags: list[bool]) -> dict[str, Any]:
    n = len(flags)
    if n == 0:
        return {"value": None, "stderr": None, "ci95": None, "n": 0}
    p = sum(flags) / n
    se = math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else 0.0
    return {"value": p, "stderr": se, "ci95": [max(0.0, p - 1.96 * se), min(1.0, p + 1.96 * se)], "n": n}


def _speed(samples: list[dict[str, Any]], wall_s: float, concurrency: int, client_bound: bool) -> dict[str, Any]:
    ok = [s for s in samples if s["status"] != "api_error"]
    itl = [x for s in ok for x in s.get("itl_ms") or []]
    out_tok = sum(s.get("output_tokens") or 0 for s in ok)
    in_tok = sum(s.get("prompt_tokens") or 0 for s in ok)
    return {
        "ttft_ms": _percentiles([s["ttft_ms"] for s in ok if s.get("ttft_ms") is not None]),
        "tpot_ms": _percentiles([s["tpot_ms"] for s in ok if s.get("tpot_ms") is not None]),
        "itl_ms": _percentiles(itl),
        "e2e_ms": _percentiles([s["e2e_ms"] for s in ok if s.get("e2e_ms") is not None]),
        "output_tokens_per_s": out_tok / wall_s,
        "total_tokens_per_s": (out_tok + in_tok) / wall_s,
        "requests_per_s": len(ok) / wall_s,
        "wall_s": wall_s,
        "concurrency": concurrency,
        "client_cpu_s": wall_s * 0.4,
        "loop_lag_ms_p99": 48.0 if client_bound else 1.7,
        "client_bound": client_bound,
    }


def _counts(samples: list[dict[str, Any]]) -> dict[str, int]:
    c = Counter(s["status"] for s in samples)
    return {
        "total": len(samples),
        **{k: c.get(k, 0) for k in STATUSES},
    }


def _timing(rng: random.Random, out_tokens: int, speed: float) -> dict[str, Any]:
    ttft = rng.lognormvariate(math.log(120.0 / speed), 0.5)
    tpot = rng.gauss(14.0 / speed, 1.5 / speed)
    tpot = max(tpot, 2.0)
    n_itl = max(out_tokens - 1, 0)
    itl = [round(max(0.1, rng.gauss(tpot, tpot * 0.2)), 2) for _ in range(n_itl)]
    e2e = ttft + tpot * n_itl
    return {
        "ttft_ms": round(ttft, 3),
        "tpot_ms": round(tpot, 3) if out_tokens >= 2 else None,
        "e2e_ms": round(e2e, 3),
        "itl_ms": itl,
    }


def _server_section(samples: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [s for s in samples if s["status"] != "api_error"]

    def sec(key: str) -> dict[str, Any]:
        vals = [s[key] / 1000.0 for s in ok if s.get(key) is not None]
        p = _percentiles(vals)
        return {k: p[k] for k in ("p50", "p90", "p99", "mean")}

    return {
        "available": True,
        "requests": len(ok),
        "prompt_tokens": sum(s.get("prompt_tokens") or 0 for s in ok),
        "generation_tokens": sum(s.get("output_tokens") or 0 for s in ok),
        "prefix_cache_hit_rate": 0.83,
        "kv_cache_usage_peak": 0.41,
        "preemptions": 0,
        "ttft_s": sec("ttft_ms"),
        "tpot_s": sec("tpot_ms"),
        "e2e_s": sec("e2e_ms"),
        "absent": ["vllm:spec_decode_num_accepted_tokens"],
    }


def _manifest(
    *,
    model: str,
    kind: str,
    tasks: dict[str, Any],
    server_argv: list[str] | None,
    concurrency: int | str,
) -> dict[str, Any]:
    server = None
    if server_argv is not None:
        server = {
            "vllm_version": "0.11.0",
            "argv": server_argv,
            "env_overrides": {"VLLM_USE_V1": "1"},
            "launcher": "evalkit",
            "startup_s": 41.7,
            "gpus": [{"name": "NVIDIA H200", "memory_total_mib": 143771, "driver": "570.124.06"}],
        }
    return {
        "evalkit_version": "0.1.0",
        "created_at": "2025-06-01T10:00:00+00:00",
        "finished_at": "2025-06-01T10:07:12+00:00",
        "command": ["evalkit", "run", "--tasks", ",".join(tasks), "--base-url", "http://gpu-box:8000/v1"],
        "endpoint": {"base_url": "http://gpu-box:8000/v1", "kind": kind},
        "model": model,
        "concurrency": concurrency,
        "versions": {"python": "3.11.9", "lm_eval": "0.4.9", "openai": "1.99.0", "vllm": "0.11.0"},
        "tasks": tasks,
        "server": server,
    }


def _fewshot_pool(size: int) -> list[str]:
    """Worked examples to draw few-shot blocks from, like lm-eval's gsm8k (v3) sampling 5 per document."""
    rng = random.Random(4321)
    pool = []
    for i in range(size):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(30, 60)))
        a, b = rng.randint(2, 90), rng.randint(2, 90)
        pool.append(
            f"Question: Train {i}: {words}? How many are left if {a} and {b}?\n"
            f"Answer: {words[:200]}. {a} + {b} = <<{a}+{b}={a + b}>>{a + b}.\n#### {a + b}"
        )
    return pool


def _fewshot_prefix(rng: random.Random, target_len: int = 2700) -> str:
    parts: list[str] = []
    i = 0
    while sum(len(p) for p in parts) < target_len:
        i += 1
        words = " ".join(rng.choice(_WORDS) for _ in range(40))
        a, b = rng.randint(2, 90), rng.randint(2, 90)
        parts.append(
            f"Question: Example {i}: {words}? How many apples are left if {a} and {b}?\n"
            f"Answer: {words[:120]}. {a} + {b} = {a + b}. #### {a + b}\n\n"
        )
    return "".join(parts)


def gsm8k_samples(
    *,
    n: int = 1319,
    seed: int = 0,
    accuracy: float = 0.78,
    speed: float = 1.0,
    api_errors: int = 5,
    truncated: int = 7,
    no_answer: int = 3,
    empty: int = 2,
    hostile: bool = False,
    fewshot_per_doc: bool = False,
) -> list[dict[str, Any]]:
    """``fewshot_per_doc``: each prompt's 5 examples are drawn from a pool of 7,000 (lm-eval's gsm8k v3 samples
    them per document with a seeded generator), else one few-shot prefix is shared by all (a first_n sampler)."""
    prefix_rng = random.Random(1234)  # the few-shot prefix is the same across runs, like lm-eval's first_n
    prefix = _fewshot_prefix(prefix_rng)
    fewshot_pool = _fewshot_pool(7000) if fewshot_per_doc else []
    draw = random.Random(1234)
    rng = random.Random(seed)
    doc_rng = random.Random(99)  # questions and targets are the same across runs
    special: dict[int, str] = {}
    ids = list(range(n))
    pool = ids[min(10, n // 2) :]
    pick = random.Random(7).sample(pool, min(len(pool), api_errors + truncated + no_answer + empty))
    for i, doc in enumerate(pick):
        if i < api_errors:
            special[doc] = "api_error"
        elif i < api_errors + truncated:
            special[doc] = "truncated"
        elif i < api_errors + truncated + no_answer:
            special[doc] = "no_answer"
        else:
            special[doc] = "empty"
    rows: list[dict[str, Any]] = []
    for doc_id in range(n):
        q_words = " ".join(doc_rng.choice(_WORDS) for _ in range(doc_rng.randint(25, 45)))
        answer = doc_rng.randint(1, 500)
        examples = "".join(x + "\n\n" for x in draw.sample(fewshot_pool, 5)) if fewshot_pool else prefix
        prompt = f"{examples}Question: Doc {doc_id}: {q_words}?\nAnswer:"
        status = special.get(doc_id, "ok")
        right = rng.random() < accuracy
        out_tokens = rng.randint(60, 250)
        given = answer if right else answer + rng.randint(1, 9)
        response: str | None = (
            " ".join(rng.choice(_WORDS) for _ in range(45))[:260] + f". So the total is {given}. #### {given}"
        )
        finish: str | None = "stop"
        error: str | None = None
        extracted: dict[str, str | None] = {"strict-match": str(given), "flexible-extract": str(given)}
        correct: dict[str, bool | None] = {"strict-match": right, "flexible-extract": right}
        timing = _timing(rng, out_tokens, speed)
        if status == "api_error":
            response = None
            finish = None
            error = "HTTP 500: Internal Server Error (after 3 attempts)"
            extracted = {"strict-match": None, "flexible-extract": None}
            correct = {"strict-match": None, "flexible-extract": None}
            out_tokens = 0
            timing = {"ttft_ms": None, "tpot_ms": None, "e2e_ms": None, "itl_ms": []}
        elif status == "truncated":
            out_tokens = 256
            response = (response or "")[:200]
            finish = "length"
            extracted = {"strict-match": None, "flexible-extract": "3"}
            correct = {"strict-match": False, "flexible-extract": False}
        elif status == "no_answer":
            response = "I am not sure how to solve this."
            extracted = {"strict-match": None, "flexible-extract": None}
            correct = {"strict-match": False, "flexible-extract": False}
        elif status == "empty":
            response = ""
            out_tokens = 0
            extracted = {"strict-match": None, "flexible-extract": None}
            correct = {"strict-match": False, "flexible-extract": False}
        rows.append(
            {
                "key": f"{seed:04d}{doc_id:08d}",
                "task": "gsm8k",
                "doc_id": doc_id,
                "sample_index": 0,
                "prompt": prompt,
                "messages": None,
                "response": response,
                "reasoning": None,
                "finish_reason": finish,
                "status": status,
                "error": error,
                "attempts": 3 if status == "api_error" else 1,
                "target": f"{q_words[:150]}: {answer - 1} + 1 = <<{answer - 1}+1={answer}>>{answer}\n#### {answer}",
                "extracted": extracted,
                "correct": correct,
                "extraction": None,
                "prompt_tokens": len(prompt) // 4,
                "output_tokens": out_tokens,
                "reasoning_tokens": None,
                **timing,
                "start_s": round(doc_id * 0.3, 3),
            }
        )
    if hostile:
        h = rows[3]
        h["prompt"] = h["prompt"] + " " + HOSTILE
        h["response"] = f"Answer with {HOSTILE}\n#### 42"
        h["reasoning"] = f"thinking {HOSTILE}"
        h["extracted"] = {"strict-match": IMG, "flexible-extract": CANARY}
        h["target"] = JINJA_EXPR
        h["finish_reason"] = CANARY
        long_row = rows[4]
        long_row["response"] = "y" * LONG_LINE_LEN + CANARY
        long_row["reasoning"] = JINJA_RAW + "z" * LONG_LINE_LEN + IMG
        for r in rows:
            if r["status"] == "api_error":
                r["error"] = f"HTTP 500: {CANARY}"
                break
    return rows


def _gsm8k_summary(samples: list[dict[str, Any]], speed_concurrency: int, client_bound: bool) -> dict[str, Any]:
    scored = [s for s in samples if s["status"] != "api_error"]
    ok_count = len(scored)
    mean_tpot = sum(s["tpot_ms"] or 0 for s in scored) / max(ok_count, 1)
    wall_s = 60.0 * (ok_count / 1319) * (mean_tpot / 14.0)  # faster decoding -> shorter wall time
    return {
        "version": 3,
        "metrics": {
            "exact_match,strict-match": _metric([bool(s["correct"]["strict-match"]) for s in scored]),
            "exact_match,flexible-extract": _metric([bool(s["correct"]["flexible-extract"]) for s in scored]),
        },
        "counts": _counts(samples),
        "speed": _speed(samples, max(wall_s, 1.0), speed_concurrency, client_bound),
        "server": _server_section(samples),
        "gpu": {"peak_mib": [121345], "samples": 412, "interval_s": 1.0},
        "detail": {},
    }


def build_gsm8k_run(
    run_dir: Path,
    *,
    n: int = 1319,
    fewshot_per_doc: bool = False,
    seed: int = 0,
    accuracy: float = 0.78,
    speed: float = 1.0,
    hostile: bool = False,
    client_bound: bool = False,
    server_argv: list[str] | None = None,
    concurrency: int = 64,
    model: str = "Qwen/Qwen3-8B",
    temperature: float = 0.0,
) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    samples = gsm8k_samples(
        n=n, seed=seed, accuracy=accuracy, speed=speed, hostile=hostile, fewshot_per_doc=fewshot_per_doc
    )
    if server_argv is None:
        server_argv = [
            "vllm",
            "serve",
            "Qwen/Qwen3-8B",
            "--max-model-len",
            "8192",
            "--gpu-memory-utilization",
            "0.9",
            "--max-num-seqs",
            "256",
        ]
    if hostile:
        server_argv = [*server_argv, "--served-model-name", CANARY]
        model = f"{model}{IMG}"
    tasks = {
        "gsm8k": {
            "version": 3,
            "data_sha256": {"test": "a" * 64, "train": "b" * 64},
            "settings": {
                "limit": None,
                "num_fewshot": 5,
                "num_samples": 1,
                "max_tokens": 256,
                "temperature": temperature,
                "top_p": None,
                "seed": 1234,
                "chat_template_kwargs": None,
            },
            "max_tokens_clamp": None,
        }
    }
    _write_json(
        run_dir / "manifest.json",
        _manifest(model=model, kind="completions", tasks=tasks, server_argv=server_argv, concurrency=concurrency),
    )
    _write_jsonl(run_dir / "samples.jsonl", samples)
    _write_json(
        run_dir / "summary.json",
        {"schema_version": 1, "tasks": {"gsm8k": _gsm8k_summary(samples, concurrency, client_bound)}},
    )
    return run_dir


def _long_text(rng: random.Random, block: str, length: int, ending: str) -> str:
    start = rng.randrange(len(block) // 2)
    body = (block * (length // len(block) + 2))[start : start + length - len(ending)]
    return body + ending


def _pass_at_k(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def build_aime_run(
    run_dir: Path,
    *,
    problems: int = 30,
    samples_per_problem: int = 16,
    response_chars: int = 30_000,
    reasoning_chars: int = 30_000,
    seed: int = 0,
    speed: float = 1.0,
    hostile: bool = False,
) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    block = " ".join(random.Random(5).choice(_WORDS) for _ in range(3000)) + "\n"
    rows: list[dict[str, Any]] = []
    per_problem: list[dict[str, Any]] = []
    difficulty = [random.Random(11 + p).random() for p in range(problems)]
    for doc_id in range(problems):
        target = str(random.Random(200 + doc_id).randint(0, 999))
        prompt = (
            f"Problem {doc_id + 1}: Find the number of ordered pairs of integers (x, y) such that ... "
            "Please reason step by step, and put your final answer within \\boxed{}."
        )
        answers: Counter[str] = Counter()
        n_correct = 0
        for k in range(samples_per_problem):
            right: bool | None = rng.random() > difficulty[doc_id]
            given: str | None = target if right else str(rng.randint(0, 999))
            status = "ok"
            finish: str | None = "stop"
            out_tokens = rng.randint(2000, 12000)
            if doc_id == 7 and k in (3, 9):
                status, finish, out_tokens = "truncated", "length", 32768
                given = None
                right = False
            error: str | None = None
            response: str | None = _long_text(rng, block, response_chars, f"\n\\boxed{{{given}}}")
            reasoning: str | None = _long_text(rng, block, reasoning_chars, "\nSo the answer follows.")
            timing = _timing(rng, out_tokens // 40, speed)  # coarse chunks: keep the file small
            timing["tpot_ms"] = round(timing["tpot_ms"] or 14.0, 3)
            if doc_id == 12 and k == 5:
                status, finish, error, response, reasoning = (
                    "api_error",
                    None,
                    "timeout after 1800 s",
                    None,
                    None,
                )
                timing = {"ttft_ms": None, "tpot_ms": None, "e2e_ms": None, "itl_ms": []}
                given, right, out_tokens = None, None, 0
            if right:
                n_correct += 1
            if given is not None:
                answers[given] += 1
            rows.append(
                {
                    "key": f"aime{seed}-{doc_id}-{k}",
                    "task": "aime25",
                    "doc_id": doc_id,
                    "sample_index": k,
                    "prompt": prompt,
                    "messages": [{"role": "user", "content": prompt}],
                    "response": response,
                    "reasoning": reasoning,
                    "finish_reason": finish,
                    "status": status,
                    "error": error,
                    "attempts": 1,
                    "target": target,
                    "extracted": {"math_verify": given},
                    "correct": {"math_verify": right},
                    "extraction": "boxed" if given is not None else None,
                    "prompt_tokens": 120,
                    "output_tokens": out_tokens,
                    "reasoning_tokens": out_tokens // 2 if out_tokens else None,
                    **timing,
                    "start_s": round(rng.random() * 600, 3),
                }
            )
        per_problem.append(
            {
                "doc_id": doc_id,
                "id": f"2025-I-{doc_id + 1}" if doc_id < 15 else f"2025-II-{doc_id - 14}",
                "n": samples_per_problem,
                "correct": n_correct,
                "accuracy": n_correct / samples_per_problem,
                "answers": dict(answers.most_common()),
            }
        )
    if hostile:
        rows[0]["response"] = f"{HOSTILE}\n\\boxed{{{CANARY}}}"
        rows[0]["extracted"] = {"math_verify": CANARY}
    n = samples_per_problem
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= n]
    metrics: dict[str, Any] = {}
    accs = [p["accuracy"] for p in per_problem]
    metrics[f"avg@{n}"] = _metric_from_values(accs)
    for k in ks:
        metrics[f"pass@{k}"] = _metric_from_values([_pass_at_k(n, p["correct"], k) for p in per_problem])
    maj = []
    for p in per_problem:
        top = max(p["answers"].items(), key=lambda kv: kv[1])[0] if p["answers"] else None
        target = rows[p["doc_id"] * n]["target"]
        maj.append(1.0 if top == target else 0.0)
    metrics[f"maj@{n}"] = _metric_from_values(maj)
    wall = 600.0 / speed
    summary = {
        "schema_version": 1,
        "tasks": {
            "aime25": {
                "version": 1,
                "metrics": metrics,
                "counts": _counts(rows),
                "speed": _speed(rows, wall, 32, False),
                "detail": {
                    "per_problem": per_problem,
                    "truncation_rate": 2 / (problems * n),
                    "answer_rate": 0.98,
                },
            }
        },
    }
    tasks = {
        "aime25": {
            "version": 1,
            "data_sha256": {"test": "c" * 64},
            "settings": {
                "limit": None,
                "num_fewshot": 0,
                "num_samples": n,
                "max_tokens": 32768,
                "temperature": 0.6,
                "top_p": 0.95,
                "seed": 0,
                "chat_template_kwargs": {"enable_thinking": True},
            },
            "max_tokens_clamp": {"requested": 38912, "clamped_to": 32768, "reason": "max_model_len"},
        }
    }
    _write_json(
        run_dir / "manifest.json",
        _manifest(model="Qwen/Qwen3-8B", kind="chat", tasks=tasks, server_argv=None, concurrency="auto"),
    )
    _write_jsonl(run_dir / "samples.jsonl", rows)
    _write_json(run_dir / "summary.json", summary)
    return run_dir


def _metric_from_values(values: list[float]) -> dict[str, Any]:
    n = len(values)
    if n == 0:
        return {"value": None, "stderr": None, "ci95": None, "n": 0}
    m = sum(values) / n
    var = sum((v - m) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    se = math.sqrt(var / n)
    return {"value": m, "stderr": se, "ci95": [max(0.0, m - 1.96 * se), min(1.0, m + 1.96 * se)], "n": n}


def build_minimal_run(run_dir: Path) -> Path:
    """An old or crashed run: sparse manifest, summary with nulls, odd samples and a torn last line."""
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_json(run_dir / "manifest.json", {"model": None, "endpoint": None, "tasks": {"gsm8k": None}})
    _write_json(
        run_dir / "summary.json",
        {
            "tasks": {
                "gsm8k": {
                    "metrics": {"exact_match,strict-match": {"value": None}, "weird": None},
                    "counts": None,
                    "speed": {"ttft_ms": None, "client_bound": None},
                },
                "broken": None,
            }
        },
    )
    lines = [
        orjson.dumps({"task": "gsm8k", "doc_id": 0, "status": "ok", "response": "#### 3"}),
        orjson.dumps({"task": "gsm8k", "doc_id": 1, "correct": {"strict-match": True}, "prompt": None}),
        orjson.dumps({"doc_id": "x", "status": 5, "correct": [1, 2], "extracted": "no", "output_tokens": "many"}),
        orjson.dumps(["not", "a", "dict"]),
        b'{"task": "gsm8k", "doc_id": 2, "resp',
    ]
    (run_dir / "samples.jsonl").write_bytes(b"\n".join(lines))
    return run_dir
