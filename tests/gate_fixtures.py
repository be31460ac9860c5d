"""Synthetic gate inputs (:mod:`evalkit.gating.inputs`): paired accuracy runs and per-request speed records.

Items have a difficulty drawn once per seed of the *item set*, so a baseline and a candidate built with the same
``items_seed`` answer the same problems; each run draws its own answers (``seed``). ``scale`` < 1 lowers every
item's chance of being right in proportion, a true drop of ``(1 - scale) * mean accuracy``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evalkit.gating import Identity, MetricSamples, RunInputs, SpeedRecords, StatusCounts, TaskInputs

N_GSM8K = 1319


def difficulties(n: int, accuracy: float, items_seed: int = 7, concentration: float = 1.0) -> np.ndarray:
    """Per-item chance of a right answer, Beta-distributed around ``accuracy`` (a low concentration gives the
    mostly-easy / mostly-hard items of real benchmarks)."""
    rng = np.random.default_rng(items_seed)
    return rng.beta(accuracy * concentration, (1 - accuracy) * concentration, size=n)


def correctness(p: np.ndarray, k: int, seed: int, scale: float = 1.0) -> dict[int, tuple[int, ...]]:
    """doc_id -> k draws of 0/1 with chance ``p[doc] * scale``."""
    rng = np.random.default_rng(seed)
    draws = (rng.random((len(p), k)) < (p * scale)[:, None]).astype(int)
    return dict(enumerate(map(tuple, draws.tolist())))


def metric(items: dict[int, tuple[int, ...]], name: str = "exact_match,strict-match") -> MetricSamples:
    return MetricSamples(name=name, filter=name.split(",")[-1], items=items)


def speed_records(
    n: int = 600,
    seed: int = 0,
    ttft_scale: float = 1.0,
    tpot_scale: float = 1.0,
    tokens_scale: float = 1.0,
    trace: list[tuple[float, int]] | None = None,
    duration_s: float = 60.0,
    slow_after_s: float | None = None,
) -> SpeedRecords:
    """``n`` answered requests sent evenly over ``duration_s`` (times ``tpot_scale``: at a fixed concurrency
    slower decoding stretches the run); TTFT log-normal around 200 ms, TPOT around 10 ms, 50..250 output
    tokens. Requests sent after ``slow_after_s`` get twice the TTFT and TPOT."""
    rng = np.random.default_rng(seed)
    start = np.linspace(0.0, duration_s * tpot_scale, n, endpoint=False)
    slow = np.where(start >= slow_after_s, 2.0, 1.0) if slow_after_s is not None else np.ones(n)
    ttft = rng.lognormal(np.log(200.0), 0.4, n) * ttft_scale * slow
    tpot = rng.lognormal(np.log(10.0), 0.2, n) * tpot_scale * slow
    tokens = np.round(rng.integers(50, 250, n) * tokens_scale).astype(int)
    e2e = ttft + tpot * (tokens - 1)
    trace = trace if trace is not None else [(0.0, 64)]
    end = max(s + e / 1000.0 for s, e in zip(start, e2e, strict=True))
    return SpeedRecords(
        ttft_ms=[float(x) for x in ttft],
        tpot_ms=[float(x) for x in tpot],
        e2e_ms=[float(x) for x in e2e],
        output_tokens=[int(x) for x in tokens],
        start_s=[float(x) for x in start],
        wall_s=float(end - start[0]),
        concurrency=trace[-1][1],
        trace=trace,
        levels=[c for _, c in trace] if len(trace) > 1 else [],
    )


def identity(**changes: Any) -> Identity:
    base: dict[str, Any] = {
        "version": "3.0",
        "data_sha256": {"test": "a" * 64, "train": "b" * 64},
        "limit": None,
        "num_fewshot": 5,
        "num_samples": 1,
        "sampling": {"temperature": 0.0, "max_tokens": 256},
        "prompt_hash": "p" * 16,
        "prompt_digests": {d: f"{d:016x}" for d in range(N_GSM8K)},
    }
    base.update(changes)
    return Identity(**base)


def task(
    metrics: dict[str, MetricSamples],
    speed: SpeedRecords | None = None,
    counts: StatusCounts | None = None,
    ident: Identity | None = None,
    name: str = "gsm8k",
) -> TaskInputs:
    n = max((len(m.items) for m in metrics.values()), default=0)
    return TaskInputs(
        name=name,
        identity=ident or identity(),
        metrics=metrics,
        speed=speed or speed_records(),
        counts=counts or StatusCounts(total=n, ok=n),
    )


def run(label: str, *tasks: TaskInputs) -> RunInputs:
    return RunInputs(label=label, tasks={t.name: t for t in tasks})
