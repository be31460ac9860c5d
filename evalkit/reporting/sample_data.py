"""The per-sample list of a run report as data: one gzip-compressed JSON block that ``report.js`` decodes and
renders lazily (rows a page at a time, a sample's texts only when it is opened).

Texts are stored once: each prompt is split into its few-shot examples and the question under test (lm-eval
joins them with its few-shot delimiter, a blank line), and every distinct example, question, conversation turn
and target goes into one table that rows point into. Long texts are cut (start and end kept) to a size budget.
The few-shot examples are left out, with a note, when they alone would push the page over its size target: the
question, answer, target and timings of every sample always stay.

Model text never becomes HTML here: it is JSON inside gzip inside base64 (which cannot close a ``<script>``),
and ``report.js`` puts it on the page with ``textContent`` only.
"""

from __future__ import annotations

import base64
import gzip
import struct
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson

from evalkit.contracts import STATUSES
from evalkit.reporting.analysis import Cut, cut_text, fit_limit, primary_correct
from evalkit.reporting.formatting import short
from evalkit.store.reader import Run, as_dict, as_int, as_list, as_num, as_str

MAX_ROWS = 2000  # samples listed; failures and wrong answers are kept first
TEXT_MAX_CHARS = 20_000  # one text is cut (head + tail) above this
TEXT_BUDGET_BYTES = 4_000_000  # all texts of the rows together, before compression
DATA_TARGET_BYTES = 1_000_000  # the encoded block, few-shot examples included only if it stays under this
GZIP_LEVEL = 9
FEWSHOT_DELIMITER = "\n\n"


def gold_answer(target: Any) -> str | None:
    """The gold answer in a target: what follows the last ``####`` (GSM8K's worked solutions end with
    ``#### 72``; lm-eval's exact_match drops everything up to it), else the target itself."""
    t = as_str(target)
    if t is None:
        return None
    _, sep, tail = t.rpartition("####")
    return tail.strip() if sep and tail.strip() else t.strip()


def split_fewshot(prompt: str, num_fewshot: int | None) -> tuple[list[str], str]:
    """(few-shot examples, question under test) of an lm-eval prompt with ``num_fewshot`` examples."""
    if not num_fewshot or FEWSHOT_DELIMITER not in prompt:
        return [], prompt
    head, _, question = prompt.rpartition(FEWSHOT_DELIMITER)
    return head.split(FEWSHOT_DELIMITER), question


def _verdict(flag: bool | None) -> str:
    return "unscored" if flag is None else ("correct" if flag else "wrong")


def pick_rows(samples: list[dict[str, Any]], max_rows: int = MAX_ROWS) -> list[dict[str, Any]]:
    """At most ``max_rows`` samples in their original order, failures and wrong answers first."""
    if len(samples) <= max_rows:
        return samples

    def rank(i: int) -> tuple[int, int]:
        s = samples[i]
        flag = primary_correct(s)[1]
        return (0 if s.get("status") not in ("ok", None) else 1 if flag is False else 2, i)

    keep = sorted(sorted(range(len(samples)), key=rank)[:max_rows])
    return [samples[i] for i in keep]


class TextTable:
    """Distinct texts, each stored once; :meth:`add` returns its index."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.texts: list[str] = []

    def add(self, text: str) -> int:
        i = self.index.get(text)
        if i is None:
            i = self.index[text] = len(self.texts)
            self.texts.append(text)
        return i


def _cut_json(c: Cut | None) -> Any:
    if c is None:
        return None
    return [c.head, c.tail, c.omitted, c.total] if c.is_cut else c.head


def _num(v: Any) -> float | None:
    x = as_num(v)
    return round(x, 1) if x is not None else None


@dataclass
class SampleSection:
    data: str  # base64 of the gzip-compressed JSON
    data_bytes: int
    shown: int
    total: int
    tasks: list[str]
    statuses: list[tuple[str, int]]
    verdicts: list[tuple[str, int]]
    limit: int  # characters kept of one text
    fewshot_left_out: list[str]  # tasks whose few-shot examples are not in the report


def _conversation(s: dict[str, Any]) -> list[tuple[str, str]]:
    """A multi-turn sample's later user messages, each request's answer (text and calls) and the tool results
    sent back, in order, as (label, text)."""
    out: list[tuple[str, str]] = []
    for n, turn in enumerate((as_dict(t) for t in as_list(s.get("turns"))), 1):
        if n > 1:
            out += [(f"turn {n} · user", as_str(as_dict(m).get("content")) or "") for m in as_list(turn.get("user"))]
        for step in (as_dict(x) for x in as_list(turn.get("requests"))):
            calls = [as_dict(c) for c in as_list(step.get("tool_calls"))]
            said = [as_str(step.get("text")) or "", *(f"{c.get('name')}({c.get('arguments')})" for c in calls)]
            out.append((f"turn {n} · assistant", "\n".join(x for x in said if x)))
            out += [(f"turn {n} · tool", as_str(r) or "") for r in as_list(step.get("results"))]
    return out


def _row(s: dict[str, Any], ti: int, table: TextTable, fewshot: list[int], long_texts: list[str]) -> dict[str, Any]:
    metric, flag = primary_correct(s)
    extracted, correct = as_dict(s.get("extracted")), as_dict(s.get("correct"))
    target = as_str(s.get("target"))
    gold = gold_answer(target)
    row: dict[str, Any] = {
        "t": ti,
        "d": as_str(s.get("doc_id")) or "—",
        "i": as_int(s.get("sample_index")) or 0,
        "s": as_str(s.get("status")) or "?",
        "v": _verdict(flag),
        "x": short(extracted.get(metric)) if metric in extracted else None,
        "g": short(gold),
        "o": as_int(s.get("output_tokens")),
        "a": _num(s.get("ttft_ms")),
        "p": _num(s.get("tpot_ms")),
        "e": _num(s.get("e2e_ms")),
        "fr": short(s.get("finish_reason"), 40),
        "er": short(s.get("error"), 1000),
        "fl": [
            [str(k), short(extracted.get(k), 1000), _verdict(c if isinstance(c := correct.get(k), bool) else None)]
            for k in dict.fromkeys([*extracted, *correct])
        ],
        "ex": [
            [k, short(s.get(k), 120)]
            for k in ("attempts", "prompt_tokens", "reasoning_tokens", "extraction")
            if s.get(k) is not None and not (k == "attempts" and s.get(k) == 1)
        ],
    }
    start = as_num(s.get("start_s"))
    if start is not None:
        row["ex"].append(["sent at", f"{start:,.3f} s"])
    prompt = as_str(s.get("prompt"))
    msgs = [as_dict(m) for m in as_list(s.get("messages"))]
    if prompt is not None:
        question = split_fewshot(prompt, len(fewshot))[1] if fewshot else prompt
        row["q"] = table.add(question)
        if fewshot:
            row["fs"] = fewshot
            row["fc"] = len(prompt) - len(question)
    turns = [m for m in msgs if as_str(m.get("content")) not in (None, prompt)]
    if turns:
        row["m"] = [[as_str(m.get("role")) or "?", table.add(as_str(m.get("content")) or "")] for m in turns]
    conversation = _conversation(s)
    if conversation:
        row["m"] = [*row.get("m", []), *([label, table.add(text)] for label, text in conversation)]
    if target is not None and target.strip() != gold:
        row["tg"] = table.add(target)
    for key, field in (("r", "response"), ("rs", "reasoning")):
        text = as_str(s.get(field))
        if text is not None:
            row[key] = len(long_texts)
            long_texts.append(text)
    return row


def _encode(obj: Any) -> str:
    return base64.b64encode(gzip.compress(orjson.dumps(obj), compresslevel=GZIP_LEVEL, mtime=0)).decode("ascii")


def _b64_len(n: int) -> int:
    return 4 * ((n + 2) // 3)


def _gzip_member(deflated: bytes, crc: int, size: int) -> bytes:
    """A gzip file around raw ``deflated`` data, with the header :func:`gzip.compress` writes (mtime 0)."""
    header = gzip.compress(b"", compresslevel=GZIP_LEVEL, mtime=0)[:10]
    return header + deflated + struct.pack("<LL", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)


def _finish_within(deflate: Any, out: bytes, crc: int, size: int, body: bytes, target: int) -> str | None:
    """The encoded block of the data compressed so far (``out``, checksum ``crc`` and length ``size`` of its
    input) followed by ``body``, or None as soon as its base64 passes ``target`` characters."""
    got, step = [out], 1 << 18
    for i in range(0, len(body), step):
        got.append(deflate.compress(body[i : i + step]))
        if _b64_len(sum(map(len, got))) > target:
            return None
    got.append(deflate.flush())
    encoded = _gzip_member(b"".join(got), zlib.crc32(body, crc), size + len(body))
    return base64.b64encode(encoded).decode("ascii") if _b64_len(len(encoded)) <= target else None


def encode_with_optional_tail(head: dict[str, Any], key: str, tail: Any, target: int) -> tuple[str, bool]:
    """``head`` with ``key`` set to ``tail`` (the last key), encoded as :func:`_encode` does, if that fits
    ``target`` characters; else ``head`` with ``key`` set to None. Returns (encoded, tail kept). The JSON
    before ``key``'s value is serialised and compressed once for both; compressing the tail stops as soon as
    its output alone passes ``target`` (compressed output only grows), so the block is byte-identical to
    ``_encode`` of the chosen object."""
    if key in head:
        raise ValueError(f"{key!r} must be left out of head: it is encoded last")
    without = orjson.dumps({**head, key: None})
    end = b"null}"
    prefix = without[: -len(end)]
    deflate = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL, 0)
    out = deflate.compress(prefix)
    crc = zlib.crc32(prefix)
    kept = _finish_within(deflate.copy(), out, crc, len(prefix), orjson.dumps(tail) + b"}", target)
    if kept is not None:
        return kept, True
    whole = out + deflate.compress(end) + deflate.flush()
    encoded = _gzip_member(whole, zlib.crc32(end, crc), len(without))
    return base64.b64encode(encoded).decode("ascii"), False


def sample_section(run: Run) -> SampleSection:
    samples = pick_rows(run.samples)
    tasks = list(dict.fromkeys(str(s.get("task")) for s in samples))
    table = TextTable()
    fewshot_table = TextTable()
    long_texts: list[str] = []
    rows = []
    manifest = run.manifest_read()
    for s in samples:
        task = str(s.get("task"))
        k = as_int(manifest.task(task).settings.get("num_fewshot"))
        prompt = as_str(s.get("prompt"))
        examples = split_fewshot(prompt, k)[0] if prompt is not None else []
        rows.append(_row(s, tasks.index(task), table, [fewshot_table.add(x) for x in examples], long_texts))
    # one cut limit for everything, so that the texts fit the budget
    everything = table.texts + long_texts
    limit = fit_limit([len(t) for t in everything], TEXT_BUDGET_BYTES, TEXT_MAX_CHARS)
    cut_long = [_cut_json(cut_text(t, limit)) for t in long_texts]
    for r in rows:
        for key in ("r", "rs"):
            if key in r:
                r[key] = cut_long[r[key]]
    data: dict[str, Any] = {
        "tasks": tasks,
        "texts": [_cut_json(cut_text(t, limit, 0.6)) for t in table.texts],
        "rows": rows,
    }
    fewshot = [_cut_json(cut_text(t, limit)) for t in fewshot_table.texts]
    left_out: list[str] = []
    if fewshot:
        encoded, kept = encode_with_optional_tail(data, "fewshot", fewshot, DATA_TARGET_BYTES)
        if not kept:
            left_out = sorted({tasks[r["t"]] for r in rows if r.get("fs")})
    else:
        encoded = _encode({**data, "fewshot": fewshot})
    statuses = Counter(str(r["s"]) for r in rows)
    verdicts = Counter(str(r["v"]) for r in rows)
    return SampleSection(
        data=encoded,
        data_bytes=len(encoded),
        shown=len(rows),
        total=len(run.samples),
        tasks=tasks,
        statuses=[(st, statuses[st]) for st in STATUSES if statuses[st]]
        + [(st, c) for st, c in statuses.items() if st not in STATUSES],
        verdicts=[(v, verdicts[v]) for v in ("correct", "wrong", "unscored") if verdicts[v]],
        limit=limit,
        fewshot_left_out=left_out,
    )
