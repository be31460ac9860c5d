"""Synthetic teacher-forced positions and ``numerics`` run dirs (no server): a text's full-vocabulary logits are
drawn once per ``text_seed``; a side's :class:`PromptPositions` reports the top ``k`` of ``softmax(logits + shift)``
and the actual token's logprob, so a perturbation of known size gives a known KL, |d-logprob| and top-1 flips.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from evalkit.contracts import PromptPositions
from evalkit.store.positions_file import PositionsWriter

TASK = "numerics"


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def text_logits(doc_id: int, n: int = 40, vocab: int = 64, text_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(logits [n, vocab], token ids [n]) of one synthetic text: peaked distributions, tokens drawn from them."""
    rng = np.random.default_rng([text_seed, doc_id])
    logits = rng.normal(0.0, 2.0, (n, vocab))
    ids = np.array([rng.choice(vocab, p=np.exp(log_softmax(row))) for row in logits], dtype=np.int32)
    return logits, ids


def positions(
    logits: np.ndarray,
    ids: np.ndarray,
    *,
    k: int = 8,
    doc_id: int = 0,
    sample_index: int = 0,
    tokens: tuple[str, ...] | None = None,
    continuation: list[int] | None = None,
) -> PromptPositions:
    """The positions a server with next-token ``logits`` (row i: the distribution of token i given those before)
    reports for the text ``ids`` at top ``k``."""
    lp = log_softmax(logits)
    order = np.argsort(-lp, axis=1, kind="stable")[:, :k]
    top_ids = order.astype(np.int32)
    top_lp = np.take_along_axis(lp, order, axis=1).astype(np.float32)
    tok_lp = lp[np.arange(len(ids)), ids].astype(np.float32)
    top_ids[0], top_lp[0], tok_lp[0] = -1, np.nan, np.nan
    return PromptPositions(
        key=f"{TASK}-{doc_id}-{sample_index}",
        task=TASK,
        doc_id=doc_id,
        sample_index=sample_index,
        token_ids=ids.astype(np.int32),
        token_logprobs=tok_lp,
        top_ids=top_ids,
        top_logprobs=top_lp,
        tokens=tokens if tokens is not None else tuple(f"t{int(i)}" for i in ids),
        continuation_ids=np.array(continuation if continuation is not None else [1, 2, 3, 4], dtype=np.int32),
    )


def side(
    docs: int = 12,
    *,
    noise: float = 0.0,
    seed: int = 1,
    k: int = 8,
    sample_index: int = 0,
    n: int = 40,
    vocab: int = 64,
) -> dict[int, PromptPositions]:
    """One side's positions of ``docs`` texts: the texts' logits plus Gaussian noise of sd ``noise`` (``seed``)."""
    rng = np.random.default_rng(seed)
    out = {}
    for d in range(docs):
        logits, ids = text_logits(d, n, vocab)
        out[d] = positions(logits + rng.normal(0.0, noise, logits.shape), ids, k=k, doc_id=d, sample_index=sample_index)
    return out


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2), encoding="utf-8")


def build_numerics_run(
    run_dir: Path,
    main: dict[int, PromptPositions],
    again: dict[int, PromptPositions] | None = None,
    *,
    model: str = "smollm2-135m",
    seed: int = 0,
) -> Path:
    """A run dir of the ``numerics`` task holding ``main`` (sample_index 0) and ``again`` (the noise-floor pass,
    sample_index 1): manifest, one sample record per request (timings drawn with ``seed``), summary and
    positions.bin."""
    run_dir.mkdir(parents=True, exist_ok=True)
    records = [*main.values(), *(again or {}).values()]
    samples = [
        {"task": TASK, "doc_id": p.doc_id, "sample_index": p.sample_index, "key": p.key, "status": "ok",
         "prompt": f"text {p.doc_id}", "correct": {}, "start_s": 0.01 * i, "e2e_ms": 5.0 + seed + 0.1 * i,
         "output_tokens": 1}
        for i, p in enumerate(records)
    ]  # fmt: skip
    with PositionsWriter(run_dir) as w:
        for p in records:
            w.append(p)
    with (run_dir / "samples.jsonl").open("w", encoding="utf-8") as f:
        for s in samples:
            f.write(json.dumps(s) + "\n")
    settings = {"limit": None, "num_fewshot": 0, "num_samples": 1, "max_tokens": 1, "temperature": 0.0,
                "docs": sorted(main)}  # fmt: skip
    _write_json(
        run_dir / "manifest.json",
        {
            "evalkit_version": "0.1.0",
            "created_at": "2026-12-01T10:00:00+00:00",
            "command": ["evalkit", "run", TASK],
            "endpoint": {"base_url": "http://127.0.0.1:8000/v1", "kind": "completions"},
            "model": model,
            "concurrency": 8,
            "tasks": {
                TASK: {"version": 1, "data_sha256": {"test": "c" * 64}, "settings": settings, "requests": len(samples)}
            },
        },
    )
    counts = {"total": len(samples), "ok": len(samples)}
    _write_json(
        run_dir / "summary.json",
        {"schema_version": 1, "tasks": {TASK: {"version": 1, "metrics": {}, "counts": counts}}},
    )
    return run_dir
