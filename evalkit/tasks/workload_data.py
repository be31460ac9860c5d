"""What the workload tasks are built from (evalkit/tasks/workload_task.py), following ``vllm bench serve``'s
dataset code (``vllm/benchmarks/datasets``): the random prompts' lengths and token ids (its ``RandomDataset``),
a Mooncake trace's lines and their shared prefix blocks, a ShareGPT file's first exchanges and its filter rules
(``is_valid_sequence``), the sessions' user turns. Pure functions of their inputs: no server, no tokenizer."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalkit.errors import TaskError

TRACE_BLOCK = 512  # tokens per Mooncake hash id: equal ids are equal prefix blocks
# vLLM's is_valid_sequence: a ShareGPT exchange is kept only within these bounds (tokens)
SHAREGPT_MIN_LEN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048


def length_range(mean: int, ratio: float, least: int = 0) -> tuple[int, int]:
    """The integer range ``[floor(mean * (1 - ratio)), ceil(mean * (1 + ratio))]`` a length is drawn from
    uniformly (``vllm bench serve --random-range-ratio``), its bounds at least ``least``."""
    return max(least, math.floor(mean * (1 - ratio))), max(least, math.ceil(mean * (1 + ratio)))


@dataclass(frozen=True)
class RandomPrompts:
    """The random workload's prompts (token ids) and their output lengths."""

    prompt_ids: list[list[int]]
    output_lens: list[int]


def random_prompts(
    vocab: np.ndarray, n: int, input_len: int, output_len: int, ratio: float, prefix_len: int, seed: int
) -> RandomPrompts:
    """``n`` prompts as ``RandomDataset`` draws them from the token ids ``vocab``: input and output lengths uniform
    over :func:`length_range` (outputs at least 1), a shared prefix of ``prefix_len`` random ids, then each prompt's
    own ids ``vocab[(offset + i + arange(len)) % len(vocab)]``, all from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    in_low, in_high = length_range(input_len, ratio)
    out_low, out_high = length_range(output_len, ratio, least=1)
    input_lens = rng.integers(in_low, in_high + 1, size=n)
    output_lens = rng.integers(out_low, out_high + 1, size=n)
    offsets = rng.integers(0, len(vocab), size=n)
    prefix = vocab[rng.integers(0, len(vocab), size=prefix_len)].tolist() if prefix_len > 0 else []
    prompts = []
    for i in range(n):
        inner = vocab[(int(offsets[i]) + i + np.arange(int(input_lens[i]))) % len(vocab)].tolist()
        prompts.append(prefix + inner)
    return RandomPrompts(prompts, [int(x) for x in output_lens])


@dataclass(frozen=True)
class TraceLine:
    """One request of a Mooncake trace: when it is due (ms), its lengths and its prefix blocks."""

    line: int  # 1-based line number in the file
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _count(value: Any, least: int) -> bool:
    return type(value) is int and value >= least


def read_trace(path: Path, limit: int | None = None) -> list[TraceLine]:
    """The lines of a Mooncake-format JSONL trace (``timestamp`` in ms, ``input_length``, ``output_length``,
    ``hash_ids``), at most ``limit``; TaskError naming the file and line of the first that is not one."""
    out: list[TraceLine] = []
    try:
        handle = path.open(encoding="utf-8")
    except OSError as e:
        raise TaskError(f"--dataset-path {path}: cannot read it ({e.strerror}); give a Mooncake JSONL trace") from None
    with handle:
        for n, raw in enumerate(handle, 1):
            if limit is not None and len(out) >= limit:
                break
            if not raw.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(raw)
            except ValueError as e:
                raise TaskError(f"{where}: not a JSON object ({e}); fix or remove the line") from None
            if not isinstance(obj, dict):
                raise TaskError(f"{where}: not a JSON object; fix or remove the line")
            ts: Any = obj.get("timestamp")
            ins: Any = obj.get("input_length")
            outs: Any = obj.get("output_length")
            ids: Any = obj.get("hash_ids")
            ts_ok = isinstance(ts, int | float) and not isinstance(ts, bool) and math.isfinite(ts) and ts >= 0
            ids_ok = isinstance(ids, list) and all(_count(h, 0) for h in ids)
            if not (ts_ok and _count(ins, 1) and _count(outs, 1) and ids_ok):
                raise TaskError(
                    f"{where}: a trace line needs timestamp (ms, >= 0), input_length and output_length (integers "
                    f">= 1) and hash_ids (a list of integers >= 0); got {raw.strip()[:120]}"
                )
            out.append(TraceLine(n, float(ts), ins, outs, tuple(ids)))
    if not out:
        raise TaskError(f"--dataset-path {path}: no trace lines; give a Mooncake JSONL trace")
    return out


def trace_prompt(line: TraceLine, vocab: np.ndarray, seed: int) -> list[int]:
    """A trace line's prompt ids: each hash id's block of ``TRACE_BLOCK`` ids (the same for the same id and
    ``seed``, so requests sharing hash ids share those blocks), cut to ``input_length``, then ids of the request's
    own past the blocks."""
    ids: list[int] = []
    for h in line.hash_ids:
        if len(ids) >= line.input_length:
            break
        ids += vocab[np.random.default_rng([seed, h]).integers(0, len(vocab), TRACE_BLOCK)].tolist()
    rest = line.input_length - len(ids)
    if rest > 0:  # past the shared blocks: this request's own tokens
        rng = np.random.default_rng([seed, 1 << 62, line.line])
        ids += vocab[rng.integers(0, len(vocab), rest)].tolist()
    return ids[: line.input_length]


@dataclass(frozen=True)
class Exchange:
    """A ShareGPT conversation's first user turn and the reply recorded for it."""

    index: int  # the conversation's position in the file
    prompt: str
    reply: str


def read_sharegpt(path: Path, seed: int) -> list[Exchange]:
    """The first exchange of each conversation with at least two turns in a ShareGPT-format JSON file, shuffled
    as ``ShareGPTDataset`` does (``random.seed(seed)``, ``random.shuffle``); TaskError naming the file and line
    (or entry) that does not read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not UTF-8"
        raise TaskError(f"--dataset-path {path}: cannot read it ({why}); give a ShareGPT JSON file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TaskError(f"{path}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno}); fix the file") from None
    if not isinstance(data, list):
        raise TaskError(f"{path}: a ShareGPT file is a JSON list of {{'conversations': [...]}} entries")
    out = []
    for i, entry in enumerate(data):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if turns is None:
            continue  # vLLM keeps only entries with conversations
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            raise TaskError(f"{path}: entry {i}: 'conversations' must be a list of {{'from', 'value'}} turns")
        if len(turns) < 2:
            continue
        first, reply = turns[0].get("value"), turns[1].get("value")
        if not isinstance(first, str) or not isinstance(reply, str):
            raise TaskError(f"{path}: entry {i}: the first two turns need a string 'value'")
        out.append(Exchange(i, first, reply))
    random.Random(seed).shuffle(out)  # ShareGPTDataset: random.seed(seed); random.shuffle(data)
    return out


def sharegpt_kept(prompt_len: int, output_len: int, fixed_output: bool = False) -> bool:
    """vLLM's ``is_valid_sequence``: neither prompt nor reply under 4 tokens (the reply's bound skipped when the
    output length is fixed), the prompt at most 1024, both together at most 2048."""
    too_short = prompt_len < SHAREGPT_MIN_LEN or (not fixed_output and output_len < SHAREGPT_MIN_LEN)
    return not (too_short or prompt_len > SHAREGPT_MAX_PROMPT or prompt_len + output_len > SHAREGPT_MAX_TOTAL)


# common English words, each one token (with its leading space) in the usual BPE vocabularies: a sessions user
# turn of N words is about N tokens
_WORDS = """time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work government number night point home water
room mother area money story fact month lot right study book eye job word business issue side kind head house
service friend father power hour game line end member law car city community name president team minute idea kid
body information back parent face others level office door health person art war history party result change
morning reason research girl guy moment air teacher force education"""
SESSION_WORDS = tuple(_WORDS.split())


def session_turns(sessions: int, turns: int, words: int, seed: int) -> list[list[str]]:
    """``sessions`` conversations of ``turns`` user turns, each ``words`` words of :data:`SESSION_WORDS` drawn
    uniformly by ``numpy.random.default_rng([seed, session])`` (a session's turns depend on its index and the
    seed only)."""
    out = []
    for i in range(sessions):
        rng = np.random.default_rng([seed, i])
        picks = rng.integers(0, len(SESSION_WORDS), size=(turns, words))
        out.append([" ".join(SESSION_WORDS[j] for j in row) for row in picks])
    return out
