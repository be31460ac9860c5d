"""The ``workload`` task kind: requests shaped like production traffic, measured for speed only (no accuracy
metric; ``--probe TASK:SHARE`` mixes a scored task's own requests in, evalkit/runner/probes.py). The built-in
``random``, ``sharegpt`` and ``trace`` tasks (``workload: NAME`` in their task file) read their settings from
:class:`evalkit.config.workload.WorkloadSettings` (the ``vllm bench serve`` flags of the same names):

- ``random``: ``--num-prompts`` prompts of ``--random-input-len`` token ids (after a shared prefix of
  ``--random-prefix-len``), each answer forced to ``--random-output-len`` tokens (``ignore_eos`` and
  ``min_tokens = max_tokens``), both lengths spread uniformly by ``--random-range-ratio`` as vLLM's
  ``RandomDataset`` does;
- ``sharegpt``: the first user turn of each conversation of a ShareGPT JSON file (``--dataset-path``), shuffled
  by ``--seed``, its recorded reply's token count as ``max_tokens`` (forced with ``--ignore-eos``), kept by vLLM's
  rules (prompt and reply at least 4 tokens, prompt at most 1024, both at most 2048); sent as text;
- ``trace``: a Mooncake JSONL trace, each line a request due at its ``timestamp`` (ms, divided by
  ``--trace-speed``: ``Request.arrival_s``) whose prompt is its ``hash_ids``' 512-token blocks (equal ids, equal
  blocks: the trace's prefix reuse is replayed), its output forced to ``output_length``;
- ``sessions``: ``--num-prompts`` conversations of ``--turns`` user turns on the chat endpoint, one sample each
  (``Request.conversation``, evalkit/client/conversation.py): each turn is ``--random-input-len`` seeded words
  (about that many tokens, workload_data.SESSION_WORDS) sent with the whole history (earlier user turns and the
  server's own answers), each answer forced to ``--random-output-len`` tokens, the next turn sent
  ``--think-time`` seconds (fixed) after the answer. A session is one sample, so the summary's ``speed`` counts
  sessions (see docs/load.md); its ``detail.turns`` gives each turn's requests, TTFT, E2E and prompt tokens (later
  turns' TTFT shows the prefix cache's reuse of the history) and ``detail.turn_requests`` the same over every
  request.

Token ids come from the server's own vocabulary without a local tokenizer: the ids vLLM's ``/tokenize`` gives
for GSM8K's questions and solutions (add_special_tokens false; several thousand distinct ids), which also
answers the server's ``max_model_len``: a workload whose longest prompt and output do not fit is refused with the
numbers. Token counts (ShareGPT's filter) come from the same ``/tokenize``, asked in bounded batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from evalkit.config.endpoint import credentials, server_root
from evalkit.config.workload import WorkloadSettings
from evalkit.contracts import Conversation, GenParams, MetricValue, Request, Response, SampleFields, Score
from evalkit.errors import TaskError
from evalkit.tasks import workload_data as wd
from evalkit.tasks.base import Task, sha256_file
from evalkit.tasks.catalogue import builtin_tasks_dir
from evalkit.tasks.data import read_jsonl
from evalkit.tasks.lmeval_scored import ServerTokenizer
from evalkit.tasks.spec import TaskSettings, TaskSpec

WORKLOADS = ("random", "sharegpt", "trace", "sessions")
DEFAULT_PROMPTS = 1000  # vllm bench serve --num-prompts
VOCAB_TEXTS = 256  # GSM8K documents whose tokens make the vocabulary the random ids are drawn from
TOKENIZE_BATCH = 64  # ShareGPT exchanges tokenised at a time, until enough are kept


class WorkloadTask(Task):
    """A workload (see the module docstring): speed only, every answer ``ok`` unless it is empty."""

    data_needed = ()
    metrics = ()
    builtin_defaults: ClassVar[dict[str, Any]] = {"temperature": 0.0}
    endpoint_kind = "completions"
    scores_in_run_process = True  # an answer is ok unless empty: no scorer to load

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        self.workload_kind = spec.choice("workload", WORKLOADS, spec.name)
        self._endpoint: tuple[str, dict[str, str]] | None = None
        self._dataset_sha: dict[str, str] = {}

    @property  # the dataset the run was given, known once it is built
    def data_sha256(self) -> dict[str, str]:
        return self._dataset_sha

    def use_endpoint(self, base_url: str, api_key: str | None) -> None:
        self._endpoint = credentials(server_root(base_url), api_key)

    def _tokenizer(self) -> ServerTokenizer:
        if self._endpoint is None:
            raise TaskError(f"task {self.name}: its prompts are built with the run's server; run it with evalkit run")
        root, headers = self._endpoint
        need = f"the {self.name} workload tokenises at the server (vLLM's /tokenize); give a vLLM endpoint"
        return ServerTokenizer(root, headers, need=need)

    def build_requests(self, settings: TaskSettings) -> list[Request]:
        opts = WorkloadSettings(**(settings.workload or {}))
        if settings.endpoint_kind not in (None, self.endpoint_kind):
            raise TaskError(
                f"task {self.name}: this workload is sent to the {self.endpoint_kind} endpoint, "
                f"not {settings.endpoint_kind}"
            )
        seed = 0 if settings.seed is None else settings.seed
        tok = self._tokenizer()
        build = {"random": self._random, "sharegpt": self._sharegpt, "trace": self._trace, "sessions": self._sessions}[
            self.workload_kind
        ]
        reqs = build(opts, settings, tok, seed)
        return [r for _, r in settings.select(reqs)]

    def _gen(self, settings: TaskSettings, out_len: int, forced: bool) -> GenParams:
        temperature = self.setting(settings, "temperature")
        return GenParams(
            max_tokens=out_len,
            temperature=0.0 if temperature is None else float(temperature),
            top_p=settings.top_p,
            seed=settings.seed,
            min_tokens=out_len if forced else None,
            ignore_eos=forced,
        )

    def _request(self, i: int, ids: list[int] | None, text: str, gen: GenParams, at: float | None = None) -> Request:
        return Request(
            task=self.name, doc_id=i, sample_index=0, prompt=text, gen=gen,
            prompt_ids=None if ids is None else tuple(ids), arrival_s=at,
        )  # fmt: skip

    def _random(self, o: WorkloadSettings, settings: TaskSettings, tok: ServerTokenizer, seed: int) -> list[Request]:
        vocab = server_vocabulary(tok)
        low, high = wd.length_range(o.random_input_len, o.random_range_ratio)
        _, out_high = wd.length_range(o.random_output_len, o.random_range_ratio, least=1)
        if o.random_prefix_len + low < 1:
            raise TaskError("--random-input-len is too small: with --random-range-ratio a prompt could be empty")
        longest = o.random_prefix_len + high
        refuse_overlong(
            tok.max_model_len, longest, out_high,
            f"random: prompts of up to {longest} tokens (--random-prefix-len {o.random_prefix_len} + "
            f"--random-input-len {o.random_input_len} x (1 + --random-range-ratio {o.random_range_ratio})) and "
            f"outputs of up to {out_high} (--random-output-len {o.random_output_len})",
            "lower --random-input-len / --random-output-len",
        )  # fmt: skip
        n = o.num_prompts or DEFAULT_PROMPTS
        built = wd.random_prompts(
            vocab, n, o.random_input_len, o.random_output_len, o.random_range_ratio, o.random_prefix_len, seed
        )
        return [
            self._request(i, ids, f"[{len(ids)} random token ids]", self._gen(settings, out, forced=True))
            for i, (ids, out) in enumerate(zip(built.prompt_ids, built.output_lens, strict=True))
        ]

    def _dataset(self, o: WorkloadSettings, what: str) -> Path:
        if o.dataset_path is None:
            raise TaskError(f"task {self.name}: give the {what} with --dataset-path FILE")
        path = Path(o.dataset_path).expanduser()
        if not path.is_file():
            raise TaskError(f"--dataset-path {path}: no such file; give the {what}")
        self._dataset_sha = {"dataset": sha256_file(path)}
        return path

    def _trace(self, o: WorkloadSettings, settings: TaskSettings, tok: ServerTokenizer, seed: int) -> list[Request]:
        path = self._dataset(o, "Mooncake JSONL trace")
        lines = wd.read_trace(path, o.num_prompts)
        vocab = server_vocabulary(tok)
        for line in lines:
            refuse_overlong(
                tok.max_model_len, line.input_length, line.output_length,
                f"{path}:{line.line}: input_length {line.input_length} and output_length {line.output_length}",
                "leave such lines out of the trace",
            )  # fmt: skip
        start = lines[0].timestamp_ms
        return [
            self._request(
                i,
                wd.trace_prompt(line, vocab, seed),
                f"[trace line {line.line}: {line.input_length} token ids]",
                self._gen(settings, line.output_length, forced=True),
                at=max(0.0, line.timestamp_ms - start) / 1000.0 / o.trace_speed,
            )
            for i, line in enumerate(lines)
        ]

    def _sharegpt(self, o: WorkloadSettings, settings: TaskSettings, tok: ServerTokenizer, seed: int) -> list[Request]:
        path = self._dataset(o, "ShareGPT JSON file")
        exchanges = wd.read_sharegpt(path, seed)
        want = o.num_prompts or DEFAULT_PROMPTS
        kept: list[tuple[wd.Exchange, int, int]] = []
        for at in range(0, len(exchanges), TOKENIZE_BATCH):
            batch = exchanges[at : at + TOKENIZE_BATCH]
            tok.prefetch([t for e in batch for t in (e.prompt, e.reply)])
            for e in batch:
                p, r = len(tok.encode(e.prompt)), len(tok.encode(e.reply))
                if wd.sharegpt_kept(p, r) and len(kept) < want:
                    kept.append((e, p, r))
            tok.cache.clear()  # bounded: one batch's texts at a time
            if len(kept) >= want:
                break
        for e, p, r in kept:
            refuse_overlong(
                tok.max_model_len, p, r, f"{path}: conversation {e.index}: a prompt of {p} tokens and a reply of {r}",
                "lower the server's length bound or filter the file",
            )  # fmt: skip
        return [
            self._request(i, None, e.prompt, self._gen(settings, r, forced=o.ignore_eos))
            for i, (e, _, r) in enumerate(kept)
        ]

    def _sessions(self, o: WorkloadSettings, settings: TaskSettings, tok: ServerTokenizer, seed: int) -> list[Request]:
        built = wd.session_turns(o.num_prompts or DEFAULT_PROMPTS, o.turns, o.random_input_len, seed)
        users = " ".join(built[0])  # every session's user turns: the same number of words
        tok.prefetch([users])
        asked = len(tok.encode(users)) + (o.turns - 1) * o.random_output_len
        tok.cache.clear()
        refuse_overlong(
            tok.max_model_len, asked, o.random_output_len,
            f"sessions: a last turn's history of about {asked} tokens (--turns {o.turns} user turns of "
            f"--random-input-len {o.random_input_len} words, {o.turns - 1} answers of --random-output-len "
            f"{o.random_output_len}) and its answer",
            "lower --turns, --random-input-len or --random-output-len",
        )  # fmt: skip
        gen = self._gen(settings, o.random_output_len, forced=True)
        return [
            Request(
                task=self.name,
                doc_id=i,
                sample_index=0,
                prompt=turns[0],
                gen=gen,
                messages=({"role": "user", "content": turns[0]},),
                conversation=Conversation(
                    turns=tuple(({"role": "user", "content": t},) for t in turns[1:]), think_s=o.think_time
                ),
            )
            for i, turns in enumerate(built)
        ]

    def score(self, request: Request, response: Response) -> Score:
        empty = not response.text and not response.output_tokens
        return Score(status="empty" if empty else "ok", extracted={}, correct={})

    def summarize(self, records: Sequence[SampleFields]) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """No metric; the detail's request outcomes and token statistics (input tokens too), no per-item table."""
        metrics, detail = super().summarize(records)
        detail["per_problem"] = []
        mine = [r for r in records if r.task == self.name and r.prompt_tokens is not None]
        from evalkit.scoring.metric_registry import token_stats

        detail["tokens"]["input"] = token_stats([r.prompt_tokens for r in mine if r.prompt_tokens is not None])
        if self.workload_kind == "sessions":
            detail["turns"], detail["turn_requests"] = per_turn([r for r in records if r.task == self.name])
        return metrics, detail

    def preview(self, settings: TaskSettings) -> str:
        return f"{self.workload_kind} workload: requests built at the run's server (docs/load.md)"


def refuse_overlong(max_model_len: int | None, prompt: int, output: int, what: str, fix: str) -> None:
    """TaskError with the numbers when ``prompt + output`` tokens exceed the server's ``max_model_len``."""
    if max_model_len is not None and prompt + output > max_model_len:
        raise TaskError(
            f"{what} need {prompt + output} tokens of context, beyond the server's max_model_len {max_model_len}; {fix}"
        )


def turn_figures(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of conversation requests (``Response.turns``' steps): how many, their TTFT (p50, p99, mean) and E2E (p50,
    p99) in ms, and their mean prompt tokens."""
    ttft = np.asarray([s["ttft_ms"] for s in steps], dtype=float)
    e2e = np.asarray([s["e2e_ms"] for s in steps if s.get("e2e_ms") is not None], dtype=float)
    prompts = [s["prompt_tokens"] for s in steps if s.get("prompt_tokens") is not None]
    return {
        "requests": len(ttft),
        "ttft_ms_p50": float(np.percentile(ttft, 50)), "ttft_ms_p99": float(np.percentile(ttft, 99)),
        "ttft_ms_mean": float(ttft.mean()),
        "e2e_ms_p50": float(np.percentile(e2e, 50)) if e2e.size else None,
        "e2e_ms_p99": float(np.percentile(e2e, 99)) if e2e.size else None,
        "prompt_tokens_mean": float(np.mean(prompts)) if prompts else None,
    }  # fmt: skip


def per_turn(records: Sequence[SampleFields]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The sessions' figures by user turn (``turn``, 1-based, and :func:`turn_figures` of each conversation's
    first request of that turn, over the conversations that reached it) and over every request of every turn."""
    by_turn: dict[int, list[dict[str, Any]]] = {}
    every: list[dict[str, Any]] = []
    for rec in records:
        for t, turn in enumerate(rec.turns or []):
            steps = [s for s in turn.get("requests", []) if s.get("ttft_ms") is not None]
            every += steps
            if steps:
                by_turn.setdefault(t, []).append(steps[0])
    rows = [{"turn": t + 1, **turn_figures(by_turn[t])} for t in sorted(by_turn)]
    return rows, turn_figures(every) if every else None


def server_vocabulary(tok: ServerTokenizer) -> np.ndarray:
    """The distinct token ids the server's ``/tokenize`` gives for the first ``VOCAB_TEXTS`` GSM8K documents
    (questions and solutions), sorted: ids the server's own tokenizer produces, drawn from by the workloads."""
    docs = read_jsonl(builtin_tasks_dir() / "data" / "gsm8k" / "test.jsonl")[:VOCAB_TEXTS]
    texts = [f"{d['question']}\n{d['answer']}" for d in docs]
    tok.prefetch(texts)
    ids = sorted({t for text in texts for t in tok.encode(text)})
    tok.cache.clear()
    if len(ids) < 2:
        raise TaskError(f"{tok.root}/tokenize gave {len(ids)} distinct token ids for GSM8K's texts; is it vLLM?")
    return np.asarray(ids, dtype=np.int64)
