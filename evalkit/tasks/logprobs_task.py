"""The ``logprobs`` task kind: a fixed text set scored teacher-forced, position by position (the built-in
``numerics``, ``numerics-chat``).

Each text goes to the server once with ``prompt_logprobs: K`` (sent without streaming, answered with token ids:
:mod:`evalkit.client.scored_answer`): the server tokenises it and returns, for every position after the first,
the logprob of the actual token and the top-K alternatives, and then generates a greedy continuation of
``max_tokens`` tokens (kept for the report's first-split marker, never scored). Each answer becomes a
:class:`evalkit.contracts.PromptPositions` that the runner writes to ``positions.bin`` before the sample's
record; the record keeps the text's ``figures`` (``positions``: positions with a logprob, ``mean_logprob``: their
mean actual-token logprob, ``top1_rate``: the share where the actual token is ranked first).

The texts: GSM8K test questions with their reference solutions, the first ``texts`` of the data file (``--limit``
takes fewer, ``--docs`` picks some), as ``Question: …\\nAnswer: …`` (completions) or a user message and the
assistant's reply (chat, sent with ``continue_final_message``). After them comes the noise-floor pass: the first
``noise_floor`` texts again, in reverse order, as ``sample_index`` 1 (their own request keys), so that the gate
can measure how far the server differs from itself. It is each text's second sample: the kind's default
``num_samples`` is 2, and ``--num-samples 1`` leaves the pass out (so one document is one request where a caller
asks for one sample, as ``evalkit watch`` does to check that a task keeps to its document selection).
Task-file keys::

    kind: logprobs
    top_k: 20          # prompt_logprobs K (vLLM's --max-logprobs default)
    texts: 64          # the text set: the first N documents of data.test
    noise_floor: 16    # texts sent again after the main pass (0: none)

An answer whose ``prompt_logprobs`` do not fit its ``prompt_token_ids`` (a token id outside int32, a key that is
not a token id included) is ``bad_positions`` (not scored, no positions); a failed request is ``api_error`` as in
every task.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from evalkit.contracts import GenParams, PromptPositions, Request, Response, SampleFields, Score
from evalkit.errors import TaskError
from evalkit.tasks.base import Task
from evalkit.tasks.data import read_jsonl
from evalkit.tasks.spec import TaskSettings, TaskSpec

NOISE_FLOOR_INDEX = 1  # the sample_index of the noise-floor pass


class BadPositions(ValueError):
    """An answer's positions do not fit its tokens; the message says how."""


TOKEN_ID_LIMIT = 2**31  # positions.bin holds token ids as int32: a vocabulary never reaches this


def _int(value: Any, what: str) -> int:
    """``value`` as a token id: an integer from 0 to TOKEN_ID_LIMIT - 1; BadPositions else."""
    if type(value) is not int:
        raise BadPositions(f"{what} is not an integer: {str(repr(value))[:80]}")
    if not 0 <= value < TOKEN_ID_LIMIT:
        raise BadPositions(f"{what} is out of range (0 to 2**31 - 1): {value}")
    return value


def _key_id(key: Any, i: int) -> int:
    """A ``prompt_logprobs`` key at position ``i`` (a token id written as a string) as a token id."""
    if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 20):
        raise BadPositions(f"position {i}: a prompt_logprobs key is not a token id: {str(repr(key))[:80]}")
    return _int(int(key), f"position {i}: a prompt_logprobs key")


def parse_positions(
    raw: dict[str, Any], k: int, request: Request, prompt_tokens: int | None
) -> tuple[PromptPositions, int]:
    """A scored answer's ``prompt_token_ids`` / ``prompt_logprobs`` / ``token_ids`` (vLLM's shape) as the
    request's positions, with an empty key (the runner's to fill), and how many actual tokens were ranked first.
    A completions prompt gives the first token's text (what the decoded tokens after it leave of the prompt);
    ``prompt_tokens``, the usage's count, is checked against the ids."""
    ids, entries = raw.get("prompt_token_ids"), raw.get("prompt_logprobs")
    if not isinstance(ids, list) or not ids:
        raise BadPositions("the answer has no prompt_token_ids")
    if not isinstance(entries, list) or len(entries) != len(ids):
        got = len(entries) if isinstance(entries, list) else "no"
        raise BadPositions(f"{got} prompt_logprobs entries for {len(ids)} prompt tokens")
    if len(ids) < 2:
        raise BadPositions("the prompt has fewer than 2 tokens: no position to score")
    if prompt_tokens is not None and prompt_tokens != len(ids):
        raise BadPositions(f"usage counts {prompt_tokens} prompt tokens, prompt_token_ids {len(ids)}")
    n = len(ids)
    token_ids = np.array([_int(t, "a prompt token id") for t in ids], dtype=np.int32)
    token_lp = np.full(n, np.nan, dtype=np.float32)
    top_ids = np.full((n, k), -1, dtype=np.int32)
    top_lp = np.full((n, k), np.nan, dtype=np.float32)
    texts = [""] * n
    first_rank = 0
    for i in range(1, n):
        pos = entries[i]
        if not isinstance(pos, dict):
            raise BadPositions(f"position {i} has no logprobs")
        actual = pos.get(str(ids[i]))
        if not isinstance(actual, dict) or not isinstance(actual.get("logprob"), int | float):
            raise BadPositions(f"position {i}: the actual token {ids[i]} is not among its logprobs")
        token_lp[i] = actual["logprob"]
        texts[i] = str(actual.get("decoded_token") or "")
        first_rank += actual.get("rank") == 1
        ranked = sorted(
            (int(e["rank"]), -float(e["logprob"]), _key_id(t, i))
            for t, e in pos.items()
            if isinstance(e, dict) and isinstance(e.get("rank"), int) and isinstance(e.get("logprob"), int | float)
        )
        top = [(t, -neg) for rank, neg, t in ranked if rank <= k][:k]
        if top:
            top_ids[i, : len(top)] = [t for t, _ in top]
            top_lp[i, : len(top)] = [lp for _, lp in top]
    rest = "".join(texts[1:])
    if request.messages is None and request.prompt.endswith(rest):
        texts[0] = request.prompt[: len(request.prompt) - len(rest)]
    cont = raw.get("token_ids") or []
    positions = PromptPositions(
        key="", task=request.task, doc_id=request.doc_id, sample_index=request.sample_index, token_ids=token_ids,
        token_logprobs=token_lp, top_ids=top_ids, top_logprobs=top_lp, tokens=tuple(texts),
        continuation_ids=np.array([_int(t, "a token id") for t in cont], dtype=np.int32),
    )  # fmt: skip
    return positions, first_rank


def figures(p: PromptPositions, top1: int) -> dict[str, float]:
    """A text's per-sample figures: scored positions, their mean actual-token logprob, the share ranked first."""
    scored = p.n - 1
    return {
        "positions": float(scored),
        "mean_logprob": float(np.mean(p.token_logprobs[1:], dtype=np.float64)),
        "top1_rate": top1 / scored,
    }


class LogprobsTask(Task):
    """See the module docstring."""

    builtin_defaults: ClassVar[Mapping[str, Any]] = {"temperature": 0.0, "max_tokens": 64, "num_samples": 2}
    metrics = ("logprob", "top1")

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        self.top_k = spec.positive_int("top_k", 20)
        self.texts = spec.positive_int("texts", 64)
        floor = spec.options.get("noise_floor", 16)
        if type(floor) is not int or floor < 0:
            raise TaskError(f"{self.name}: noise_floor must be a whole number of texts (0: none), got {floor!r}")
        self.noise_floor = floor
        docs = read_jsonl(self.data_files["test"])[: self.texts]
        for d, doc in enumerate(docs):
            if not isinstance(doc.get("question"), str) or not isinstance(doc.get("answer"), str):
                raise TaskError(f"{self.name}: document {d} of {self.data_files['test']} lacks question/answer")
        self.items = [{"id": str(d), "question": x["question"], "solution": x["answer"]} for d, x in enumerate(docs)]

    def _request(self, doc_id: int, item: dict[str, Any], index: int, gen: GenParams, chat: bool) -> Request:
        q, a = item["question"], item["solution"]
        if chat:
            msgs = ({"role": "user", "content": q}, {"role": "assistant", "content": a})
            return Request(self.name, doc_id, index, q, gen, messages=msgs)
        return Request(self.name, doc_id, index, f"Question: {q}\nAnswer: {a}", gen)

    def build_requests(self, settings: TaskSettings) -> list[Request]:
        chat = (settings.endpoint_kind or self.endpoint_kind) == "chat"
        gen = GenParams(
            max_tokens=int(self.setting(settings, "max_tokens")),
            temperature=float(self.setting(settings, "temperature")),
            seed=settings.seed,
            prompt_logprobs=self.top_k,
        )
        if settings.num_samples not in (1, 2):
            raise TaskError(
                f"{self.name}: num_samples must be 2 (with the noise-floor pass) or 1 (without), got "
                f"{settings.num_samples}"
            )
        chosen = settings.select(self.items)
        main = [self._request(d, item, 0, gen, chat) for d, item in chosen]
        again = chosen[: self.noise_floor][::-1] if settings.num_samples == 2 else []
        return main + [self._request(d, item, NOISE_FLOOR_INDEX, gen, chat) for d, item in again]

    def score(self, request: Request, response: Response) -> Score:
        try:
            p, top1 = parse_positions(response.logprobs or {}, self.top_k, request, response.prompt_tokens)
        except BadPositions as e:
            return Score("bad_positions", {}, {}, extraction=f"positions do not fit the tokens: {e}")
        figs = figures(p, top1)
        if not all(math.isfinite(v) for v in figs.values()):
            return Score("bad_positions", {}, {}, extraction="positions do not fit the tokens: a logprob is not finite")
        return Score("ok", {}, {}, figures=figs, positions=p)

    def metric_names(self, settings: TaskSettings | None = None) -> list[str]:
        return ["mean_token_logprob", "top1_rate"]

    def detail(self, samples: Any) -> dict[str, Any]:
        from evalkit.scoring.metric_registry import count_statuses

        records: list[SampleFields] = samples.records
        scored = [r for r in records if r.figures]
        return {
            "statuses": count_statuses(records),
            "texts": sum(1 for r in scored if r.sample_index == 0),
            "noise_floor_texts": sum(1 for r in scored if r.sample_index == NOISE_FLOOR_INDEX),
            "positions": int(sum(r.figures["positions"] for r in scored if r.figures)),
            "top_k": self.top_k,
        }
