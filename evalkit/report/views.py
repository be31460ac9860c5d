"""View models: everything the templates show, computed in Python from :class:`RunData`.

Templates only loop and print; every missing or malformed field of the store becomes None / "—" here.
Model text is passed as plain ``str`` (autoescaped by Jinja), never as ``Markup``.
"""

from __future__ import annotations

import json
import math
import shlex
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from markupsafe import escape

from evalkit.report.analysis import (
    Cut,
    Flip,
    accuracy_by_length,
    cdf_points,
    compute_flips,
    cut_text,
    fit_limit,
    length_bucket_labels,
    pareto_front,
    primary_correct,
    sample_values,
    shared_prefix,
)
from evalkit.report.store import RunData, as_dict, as_int, as_list, as_num, as_str

DASH = "—"
TEXT_LIMIT = 3000  # characters kept of one long text (head + tail)
# Size bound: a report aims at REPORT_TARGET_BYTES. Inlined assets take ~ASSET_BYTES, each sample row about
# ROW_BYTES of markup; what is left goes to model and prompt text (cut with one limit, see fit_limit).
REPORT_TARGET_BYTES = 4_300_000
ASSET_BYTES = 260_000
ROW_BYTES = 1000
CUT_NOTE_BYTES = 160
MIN_TEXT_BYTES = 400_000
FLIP_TEXT_BYTES = 2_000_000
MAX_ROWS = 2000  # sample rows shown; failures and wrong answers are kept first
MAX_FLIPS = 300  # flips shown per direction
SHORT_LIMIT = 300  # extracted answers, targets, errors in the row header
SHARED_MIN_CHARS = 200
STATUSES = ("ok", "truncated", "no_answer", "empty", "api_error")
SPEED_KEYS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E latency"))


# ----------------------------------------------------------------------------------------------------------
# Formatting (also registered as Jinja filters)


def fmt_num(v: Any, nd: int = 1) -> str:
    x = as_num(v)
    if x is None:
        return DASH
    return f"{x:,.{nd}f}"


def fmt_int(v: Any) -> str:
    x = as_num(v)
    if x is None:
        return DASH
    return f"{round(x):,}"


def fmt_ms(v: Any) -> str:
    x = as_num(v)
    if x is None:
        return DASH
    if abs(x) >= 100:
        return f"{x:,.0f} ms"
    return f"{x:,.1f} ms"


def fmt_pct(v: Any, nd: int = 1) -> str:
    x = as_num(v)
    if x is None:
        return DASH
    return f"{100 * x:.{nd}f}%"


def fmt_sig(v: Any) -> str:
    x = as_num(v)
    if x is None:
        return DASH
    return f"{x:.4g}"


def compact_json(v: Any) -> str:
    if isinstance(v, str):
        return v
    try:
        return json.dumps(v, ensure_ascii=False, separators=(", ", ": "), sort_keys=False, default=str)
    except (TypeError, ValueError):
        return str(v)


def short(text: Any, limit: int = SHORT_LIMIT) -> str | None:
    if text is None:
        return None
    s = text if isinstance(text, str) else compact_json(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


# ----------------------------------------------------------------------------------------------------------
# Accuracy metrics


@dataclass
class MetricView:
    name: str  # key in summary.json, e.g. "exact_match,strict-match"
    label: str
    value: float | None
    value_str: str
    ci_str: str
    n: int | None
    lo: float | None = None
    hi: float | None = None
    is_fraction: bool = True


def metric_label(name: str) -> str:
    metric, _, flt = name.partition(",")
    return f"{metric} · {flt}" if flt else metric


def metric_view(name: str, m: Any) -> MetricView:
    d = as_dict(m)
    value = as_num(d.get("value"))
    ci = as_list(d.get("ci95"))
    lo = as_num(ci[0]) if len(ci) == 2 else None
    hi = as_num(ci[1]) if len(ci) == 2 else None
    stderr = as_num(d.get("stderr"))
    if lo is None and hi is None and value is not None and stderr is not None:
        lo, hi = value - 1.96 * stderr, value + 1.96 * stderr
    nums = [x for x in (value, lo, hi) if x is not None]
    frac = all(-1e-9 <= x <= 1 + 1e-9 for x in nums)
    f = fmt_pct if frac else fmt_sig
    ci_str = f"95% CI {f(lo)} – {f(hi)}" if lo is not None and hi is not None else "95% CI " + DASH
    return MetricView(
        name=name,
        label=metric_label(name),
        value=value,
        value_str=f(value),
        ci_str=ci_str,
        n=as_int(d.get("n")),
        lo=lo,
        hi=hi,
        is_fraction=frac,
    )


def metric_views(task_summary: dict[str, Any]) -> list[MetricView]:
    return [metric_view(str(k), v) for k, v in as_dict(task_summary.get("metrics")).items()]


# ----------------------------------------------------------------------------------------------------------
# Provenance


def endpoint_host(base_url: Any) -> str | None:
    """scheme://host[:port]/path of the endpoint, without credentials, query or fragment."""
    s = as_str(base_url)
    if not s:
        return None
    try:
        u = urlsplit(s)
        host = u.hostname or ""
        port = f":{u.port}" if u.port else ""
    except ValueError:
        return None
    if not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    scheme = f"{u.scheme}://" if u.scheme else ""
    return f"{scheme}{host}{port}{u.path}"


def argv_str(argv: Any) -> str | None:
    items = as_list(argv)
    if not items:
        return None
    return shlex.join(str(a) for a in items)


def gpu_summary(gpus: Any) -> str | None:
    names = [as_str(as_dict(g).get("name")) or "GPU" for g in as_list(gpus)]
    if not names:
        return None
    counts = Counter(names)
    return ", ".join(f"{n}× {name}" for name, n in counts.items())


def parse_argv(argv: Any) -> tuple[list[str], dict[str, str]]:
    """(positional arguments, {flag: value}) of a server command line; a bare flag gets "true"."""
    toks = [str(a) for a in as_list(argv)]
    pos: list[str] = []
    flags: dict[str, str] = {}
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.startswith("-") and len(t) > 1 and not _is_number(t):
            name, eq, val = t.partition("=")
            if not eq:
                if i + 1 < len(toks) and (not toks[i + 1].startswith("-") or _is_number(toks[i + 1])):
                    val = toks[i + 1]
                    i += 1
                else:
                    val = "true"
            flags[name] = val
        else:
            pos.append(t)
        i += 1
    return pos, flags


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


@dataclass
class KV:
    key: str
    value: str | None
    title: str | None = None  # full value when ``value`` is shortened
    mono: bool = False


@dataclass
class TaskProvenance:
    name: str
    version: str | None
    data_sha256: list[KV]
    settings: list[KV]
    clamp: str | None


def provenance(run: RunData) -> tuple[list[KV], list[TaskProvenance]]:
    m = run.manifest
    endpoint = as_dict(m.get("endpoint"))
    versions = as_dict(m.get("versions"))
    server = as_dict(m.get("server"))
    rows: list[KV] = [
        KV("Model", as_str(m.get("model"))),
        KV("Endpoint", endpoint_host(endpoint.get("base_url")), mono=True),
        KV("API", as_str(endpoint.get("kind"))),
        KV("Concurrency", as_str(m.get("concurrency"))),
        KV("Started", as_str(m.get("created_at"))),
        KV("Finished", as_str(m.get("finished_at"))),
        KV("evalkit", as_str(m.get("evalkit_version"))),
        KV("vLLM", as_str(server.get("vllm_version") or versions.get("vllm"))),
    ]
    for k, v in versions.items():
        if k != "vllm":
            rows.append(KV(str(k), as_str(v)))
    if server:
        rows.append(KV("Server command", argv_str(server.get("argv")), mono=True))
        env = as_dict(server.get("env_overrides"))
        if env:
            rows.append(KV("Server env", " ".join(f"{k}={v}" for k, v in env.items()), mono=True))
        rows.append(KV("Launcher", as_str(server.get("launcher"))))
        startup = as_num(server.get("startup_s"))
        rows.append(KV("Server startup", f"{startup:.1f} s" if startup is not None else None))
        for i, g in enumerate(as_list(server.get("gpus"))):
            gd = as_dict(g)
            extra = ", ".join(f"{k} {v}" for k, v in gd.items() if k not in ("name", "memory_total_mib"))
            mem = as_num(gd.get("memory_total_mib"))
            desc = as_str(gd.get("name")) or "GPU"
            if mem is not None:
                desc += f" ({mem:,.0f} MiB)"
            if extra:
                desc += f"; {extra}"
            rows.append(KV(f"GPU {i}", desc))
    elif "server" in m:
        rows.append(KV("Server", "not launched by evalkit (no server flags recorded)"))
    cmd = argv_str(m.get("command"))
    if cmd:
        rows.append(KV("Command", cmd, mono=True))
    rows.append(KV("Run directory", run.path.resolve().name, mono=True))
    tasks: list[TaskProvenance] = []
    for name, t in run.manifest_tasks.items():
        sha = [KV(str(split), as_str(h), mono=True) for split, h in as_dict(t.get("data_sha256")).items()]
        settings = [
            KV(str(k), compact_json(v) if v is not None else "null", mono=True)
            for k, v in as_dict(t.get("settings")).items()
        ]
        clamp = t.get("max_tokens_clamp")
        tasks.append(
            TaskProvenance(
                name=name,
                version=as_str(t.get("version")),
                data_sha256=sha,
                settings=settings,
                clamp=compact_json(clamp) if clamp else None,
            )
        )
    return rows, tasks


# ----------------------------------------------------------------------------------------------------------
# Banners


@dataclass
class Banner:
    level: str  # "warn" | "info"
    text: str


def run_banners(run: RunData) -> list[Banner]:
    out: list[Banner] = []
    for note in run.notes:
        out.append(Banner("warn", note))
    for name, t in run.summary_tasks.items():
        speed = as_dict(t.get("speed"))
        if speed.get("client_bound") is True:
            lag = as_num(speed.get("loop_lag_ms_p99"))
            cpu = as_num(speed.get("client_cpu_s"))
            wall = as_num(speed.get("wall_s"))
            detail = []
            if lag is not None:
                detail.append(f"event-loop lag p99 {lag:.1f} ms")
            if cpu is not None and wall is not None:
                detail.append(f"client CPU {cpu:.1f} s over {wall:.1f} s wall")
            extra = f" ({'; '.join(detail)})" if detail else ""
            out.append(
                Banner(
                    "warn",
                    f"{name}: the client was the bottleneck{extra}. Speed numbers are lower bounds for the "
                    "server; rerun with lower concurrency or a faster client machine.",
                )
            )
        counts = as_dict(t.get("counts"))
        total = as_int(counts.get("total"))
        of = f" of {total:,}" if total is not None else ""
        errors = as_int(counts.get("api_error")) or 0
        if errors > 0:
            out.append(Banner("warn", f"{name}: {errors:,}{of} requests failed (api_error) and were not scored."))
        truncated = as_int(counts.get("truncated")) or 0
        if truncated > 0:
            out.append(
                Banner(
                    "warn",
                    f"{name}: {truncated:,}{of} responses were truncated at max_tokens (finish_reason "
                    "length); they are scored as they are.",
                )
            )
    for name, t in run.manifest_tasks.items():
        clamp = t.get("max_tokens_clamp")
        if clamp:
            out.append(Banner("info", f"{name}: max_tokens was clamped: {compact_json(clamp)}"))
    return out


# ----------------------------------------------------------------------------------------------------------
# Speed, server, GPU


@dataclass
class SpeedCard:
    label: str
    value: str
    sub: str = ""


def speed_cards(speed: dict[str, Any]) -> list[SpeedCard]:
    ttft = as_dict(speed.get("ttft_ms"))
    tpot = as_dict(speed.get("tpot_ms"))
    conc = speed.get("concurrency")
    wall = as_num(speed.get("wall_s"))
    sub = []
    if conc is not None:
        sub.append(f"concurrency {conc}")
    if wall is not None:
        sub.append(f"{wall:,.1f} s wall")
    return [
        SpeedCard("Output tok/s", fmt_num(speed.get("output_tokens_per_s")), " · ".join(sub)),
        SpeedCard(
            "Requests/s",
            fmt_num(speed.get("requests_per_s"), 2),
            f"total tok/s {fmt_num(speed.get('total_tokens_per_s'))}",
        ),
        SpeedCard("TTFT p50", fmt_ms(ttft.get("p50")), f"p99 {fmt_ms(ttft.get('p99'))}"),
        SpeedCard("TPOT p50", fmt_ms(tpot.get("p50")), f"p99 {fmt_ms(tpot.get('p99'))}"),
    ]


@dataclass
class PctRow:
    label: str
    mean: str
    p50: str
    p90: str
    p99: str
    n: str


def speed_table(speed: dict[str, Any]) -> tuple[list[PctRow], list[KV]]:
    rows = []
    for key, label in SPEED_KEYS:
        p = as_dict(speed.get(key))
        if not p:
            continue
        rows.append(
            PctRow(
                label,
                fmt_ms(p.get("mean")),
                fmt_ms(p.get("p50")),
                fmt_ms(p.get("p90")),
                fmt_ms(p.get("p99")),
                fmt_int(p.get("n")),
            )
        )
    extra = [
        KV("Output tokens/s", fmt_num(speed.get("output_tokens_per_s"))),
        KV("Total tokens/s", fmt_num(speed.get("total_tokens_per_s"))),
        KV("Requests/s", fmt_num(speed.get("requests_per_s"), 3)),
        KV(
            "Wall time",
            fmt_num(speed.get("wall_s")) + " s" if as_num(speed.get("wall_s")) is not None else DASH,
        ),
        KV("Concurrency", as_str(speed.get("concurrency"))),
        KV(
            "Client CPU",
            fmt_num(speed.get("client_cpu_s")) + " s" if as_num(speed.get("client_cpu_s")) is not None else DASH,
        ),
        KV("Event-loop lag p99", fmt_ms(speed.get("loop_lag_ms_p99"))),
        KV("Client-bound", _flag_str(speed.get("client_bound"), "yes", "no", DASH)),
    ]
    return rows, extra


@dataclass
class ServerRow:
    label: str
    server: str
    client: str = ""


def server_rows(server: dict[str, Any], speed: dict[str, Any]) -> list[ServerRow]:
    rows = [
        ServerRow("Requests", fmt_int(server.get("requests"))),
        ServerRow("Prompt tokens", fmt_int(server.get("prompt_tokens"))),
        ServerRow("Generation tokens", fmt_int(server.get("generation_tokens"))),
        ServerRow("Prefix-cache hit rate", fmt_pct(server.get("prefix_cache_hit_rate"))),
        ServerRow("KV-cache usage peak", fmt_pct(server.get("kv_cache_usage_peak"))),
        ServerRow("Preemptions", fmt_int(server.get("preemptions"))),
    ]
    for skey, ckey, label in (
        ("ttft_s", "ttft_ms", "TTFT"),
        ("tpot_s", "tpot_ms", "TPOT"),
        ("e2e_s", "e2e_ms", "E2E latency"),
    ):
        sp = as_dict(server.get(skey))
        cp = as_dict(speed.get(ckey))
        for q in ("p50", "p90", "p99", "mean"):
            sv = as_num(sp.get(q))
            if sv is None and as_num(cp.get(q)) is None:
                continue
            rows.append(ServerRow(f"{label} {q}", fmt_ms(sv * 1000 if sv is not None else None), fmt_ms(cp.get(q))))
    known = {
        "available",
        "requests",
        "prompt_tokens",
        "generation_tokens",
        "prefix_cache_hit_rate",
        "kv_cache_usage_peak",
        "preemptions",
        "ttft_s",
        "tpot_s",
        "e2e_s",
        "absent",
    }
    for k, v in server.items():
        if k not in known and v is not None:
            rows.append(ServerRow(str(k), short(v) or DASH))
    return rows


@dataclass
class GpuRow:
    index: int
    name: str
    total_mib: float | None
    peak_mib: float | None
    total: str
    peak: str
    share: str


def gpu_rows(gpu: dict[str, Any], manifest_gpus: Any) -> tuple[list[GpuRow], list[KV]]:
    peaks = as_list(gpu.get("peak_mib"))
    mgpus = as_list(manifest_gpus)
    rows = []
    for i in range(max(len(peaks), len(mgpus))):
        g = as_dict(mgpus[i]) if i < len(mgpus) else {}
        total = as_num(g.get("memory_total_mib"))
        peak = as_num(peaks[i]) if i < len(peaks) else None
        share = fmt_pct(peak / total) if peak is not None and total else DASH
        rows.append(GpuRow(i, as_str(g.get("name")) or DASH, total, peak, fmt_int(total), fmt_int(peak), share))
    extra = [KV(str(k), short(v)) for k, v in gpu.items() if k != "peak_mib"]
    return rows, extra


# ----------------------------------------------------------------------------------------------------------
# Task detail (e.g. AIME per-problem table)


@dataclass
class ProblemRow:
    doc_id: str
    id: str
    n: str
    correct: str
    accuracy: float | None
    accuracy_str: str
    answers: str


@dataclass
class DetailView:
    per_problem: list[ProblemRow]
    scalars: list[KV]
    nested: list[KV]  # pretty JSON, cut


def detail_view(detail: Any) -> DetailView:
    d = as_dict(detail)
    problems = []
    for p in as_list(d.get("per_problem")):
        pd = as_dict(p)
        answers = as_dict(pd.get("answers"))
        top = sorted(answers.items(), key=lambda kv: -(as_num(kv[1]) or 0))[:6]
        ans = ", ".join(f"{short(a, 40)} ×{c}" for a, c in top)
        if len(answers) > len(top):
            ans += f", … ({len(answers) - len(top)} more)"
        acc = as_num(pd.get("accuracy"))
        problems.append(
            ProblemRow(
                doc_id=as_str(pd.get("doc_id")) or DASH,
                id=as_str(pd.get("id")) or DASH,
                n=fmt_int(pd.get("n")),
                correct=fmt_int(pd.get("correct")),
                accuracy=acc if acc is not None and 0 <= acc <= 1 else None,
                accuracy_str=fmt_pct(acc) if acc is not None and 0 <= acc <= 1 else fmt_sig(acc),
                answers=ans,
            )
        )
    scalars, nested = [], []
    for k, v in d.items():
        if k == "per_problem":
            continue
        if isinstance(v, dict | list):
            text = json.dumps(v, indent=1, ensure_ascii=False, default=str)
            nested.append(KV(str(k), text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "\n…"))
        elif isinstance(v, float) and 0 <= v <= 1 and ("rate" in k or "frac" in k or "share" in k):
            scalars.append(KV(str(k), fmt_pct(v, 2)))
        else:
            scalars.append(KV(str(k), short(v)))
    return DetailView(problems, scalars, nested)


# ----------------------------------------------------------------------------------------------------------
# Texts in sample rows


@dataclass
class TextRef:
    """A long text as shown: possibly cut, possibly minus a shared prefix, or a pointer to a shared text."""

    cut: Cut | None = None
    prefix_anchor: str | None = None
    prefix_chars: int = 0
    shared_anchor: str | None = None
    shared_label: str = ""
    shared_chars: int = 0
    note: str | None = None  # e.g. "same as the prompt"
    raw: str | None = None  # before cutting (dropped once cut)
    tail_share: float = 0.34

    @property
    def empty(self) -> bool:
        return self.cut is None and self.shared_anchor is None and self.note is None and self.prefix_anchor is None


@dataclass
class SharedText:
    anchor: str
    label: str
    chars: int
    cut: Cut | None
    text: str = ""  # the full text, for matching (not rendered)


@dataclass
class Message:
    role: str
    text: TextRef


@dataclass
class FilterResult:
    name: str
    extracted: str | None
    verdict: str


@dataclass
class SampleRow:
    task: str
    doc_id: str
    sample_index: int
    status: str
    verdict: str  # correct | wrong | unscored
    metric: str | None
    extracted: str | None
    target: str | None
    finish_reason: str | None
    output_tokens: str
    ttft: str
    tpot: str
    e2e: str
    error: str | None
    prompt: TextRef
    messages: list[Message]
    response: TextRef
    reasoning: TextRef
    filters: list[FilterResult]
    extra: list[KV] = field(default_factory=list)


class TextPool:
    """Collects the texts of a report's rows, dedupes repeats, then cuts all of them to fit a budget."""

    def __init__(self, anchor_prefix: str) -> None:
        self.anchor_prefix = anchor_prefix
        self.refs: list[TextRef] = []
        self.shared: dict[str, SharedText] = {}
        self._counts: Counter[str] = Counter()

    def count(self, text: str | None) -> None:
        if text and len(text) >= SHARED_MIN_CHARS:
            self._counts[text] += 1

    def ref(self, text: str | None, *, tail_share: float = 0.34, dedupe: bool = True) -> TextRef:
        if text is None:
            return TextRef()
        if dedupe and len(text) >= SHARED_MIN_CHARS and self._counts[text] >= 2:
            st = self.shared.get(text)
            if st is None:
                k = len(self.shared) + 1
                st = SharedText(f"{self.anchor_prefix}-s{k}", f"shared text {k}", len(text), None)
                self.shared[text] = st
            return TextRef(shared_anchor=st.anchor, shared_label=st.label, shared_chars=st.chars)
        r = TextRef(raw=text, tail_share=tail_share)
        self.refs.append(r)
        return r

    def finish(self, budget: int, max_limit: int = TEXT_LIMIT) -> int:
        """Cut every collected text with one limit chosen so that all of them, HTML-escaped and UTF-8
        encoded, fit ``budget`` bytes (as far as a limit of a few hundred characters allows); returns it."""
        shared_total = sum(_html_bytes(t[: max_limit * 4]) for t in self.shared)
        lengths = [len(r.raw or "") for r in self.refs]
        weights = [_html_bytes(r.raw) / len(r.raw) if r.raw else 1.0 for r in self.refs]
        limit = fit_limit(
            lengths, max(budget - shared_total, 0), max_limit, weights=weights, cut_overhead=CUT_NOTE_BYTES
        )
        for r in self.refs:
            r.cut = cut_text(r.raw, limit, r.tail_share)
            r.raw = None
        for text, st in self.shared.items():
            st.cut = cut_text(text, max_limit * 4)
        return limit


def _html_bytes(text: str) -> int:
    return len(str(escape(text)).encode("utf-8", "replace"))


def _flag_str(v: Any, yes: str, no: str, other: str) -> str:
    if v is True:
        return yes
    if v is False:
        return no
    return other


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _verdict(flag: bool | None) -> str:
    return "unscored" if flag is None else ("correct" if flag else "wrong")


def _pick_rows(samples: list[dict[str, Any]], max_rows: int) -> list[dict[str, Any]]:
    """At most ``max_rows`` samples in their original order, failures and wrong answers first."""
    if len(samples) <= max_rows:
        return samples

    def rank(i: int) -> tuple[int, int]:
        s = samples[i]
        _, flag = primary_correct(s)
        status = s.get("status")
        return (0 if status not in ("ok", None) else 1 if flag is False else 2, i)

    keep = sorted(sorted(range(len(samples)), key=rank)[:max_rows])
    return [samples[i] for i in keep]


@dataclass
class SampleSection:
    rows: list[SampleRow]
    shown: int
    total: int
    prefixes: list[SharedText]  # one per task with a shared prompt prefix
    shared: list[SharedText]
    limit: int
    tasks: list[str]
    statuses: list[tuple[str, int]]
    verdicts: list[tuple[str, int]]


def sample_section(run: RunData, anchor: str = "t") -> SampleSection:
    samples = _pick_rows(run.samples, MAX_ROWS)
    pool = TextPool(anchor)
    # Shared prompt prefix per task (e.g. lm-eval's few-shot block): shown once, each row shows only its tail.
    by_task: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        by_task.setdefault(str(s.get("task")), []).append(s)
    prefixes: dict[str, SharedText] = {}
    for ti, (task, ss) in enumerate(by_task.items()):
        prompts = [p for p in (as_str(s.get("prompt")) for s in ss) if p is not None]
        pre = shared_prefix(prompts, SHARED_MIN_CHARS) if len(prompts) == len(ss) else ""
        if pre:
            prefixes[task] = SharedText(
                f"{anchor}-p{ti}", f"Shared prompt prefix of {task}", len(pre), cut_text(pre, TEXT_LIMIT * 4)
            )
    # Count repeats (system prompts, few-shot chat turns, identical prompts of repeated samples).
    for s in samples:
        task = str(s.get("task"))
        prompt = as_str(s.get("prompt"))
        ptx = prefixes.get(task)
        pool.count(prompt[ptx.chars :] if prompt is not None and ptx else prompt)
        for msg in as_list(s.get("messages")):
            content = as_str(as_dict(msg).get("content"))
            if content != prompt:
                pool.count(content)
    rows: list[SampleRow] = []
    for s in samples:
        task = str(s.get("task"))
        prompt = as_str(s.get("prompt"))
        ptx = prefixes.get(task)
        if prompt is not None and ptx is not None:
            pref = pool.ref(prompt[ptx.chars :], tail_share=0.6)
            pref.prefix_anchor, pref.prefix_chars = ptx.anchor, ptx.chars
        else:
            pref = pool.ref(prompt, tail_share=0.6)
        messages: list[Message] = []
        msgs = as_list(s.get("messages"))
        only_prompt = len(msgs) == 1 and as_str(as_dict(msgs[0]).get("content")) == prompt
        if not only_prompt:
            for msg in msgs:
                md = as_dict(msg)
                content = as_str(md.get("content"))
                role = as_str(md.get("role")) or "?"
                if content is not None and content == prompt:
                    messages.append(Message(role, TextRef(note="the prompt above")))
                else:
                    messages.append(Message(role, pool.ref(content, tail_share=0.6)))
        metric, flag = primary_correct(s)
        extracted = as_dict(s.get("extracted"))
        correct = as_dict(s.get("correct"))
        status = as_str(s.get("status")) or "?"
        extra = []
        for k in ("attempts", "prompt_tokens", "reasoning_tokens", "extraction"):
            v = s.get(k)
            if v is not None and not (k == "attempts" and v == 1):
                extra.append(KV(k, short(v, 120)))
        filters = [
            FilterResult(str(k), short(extracted.get(k), 1000), _verdict(_bool(correct.get(k))))
            for k in dict.fromkeys([*extracted, *correct])
        ]
        rows.append(
            SampleRow(
                task=task,
                doc_id=as_str(s.get("doc_id")) or DASH,
                sample_index=as_int(s.get("sample_index")) or 0,
                status=status,
                verdict=_verdict(flag),
                metric=metric,
                extracted=short(extracted.get(metric)) if metric in extracted else None,
                target=short(s.get("target")),
                finish_reason=short(s.get("finish_reason"), 40),
                output_tokens=fmt_int(s.get("output_tokens")),
                ttft=fmt_ms(s.get("ttft_ms")),
                tpot=fmt_ms(s.get("tpot_ms")),
                e2e=fmt_ms(s.get("e2e_ms")),
                error=short(s.get("error"), 1000),
                prompt=pref,
                messages=messages,
                response=pool.ref(as_str(s.get("response")), dedupe=False),
                reasoning=pool.ref(as_str(s.get("reasoning")), dedupe=False),
                filters=filters,
                extra=extra,
            )
        )
    budget = REPORT_TARGET_BYTES - ASSET_BYTES - ROW_BYTES * len(rows)
    budget -= sum(_html_bytes(p.cut.head + p.cut.tail) for p in prefixes.values() if p.cut)
    limit = pool.finish(max(budget, MIN_TEXT_BYTES))
    statuses = Counter(r.status for r in rows)
    verdicts = Counter(r.verdict for r in rows)
    ordered_status = [(st, statuses[st]) for st in STATUSES if statuses[st]] + [
        (st, c) for st, c in statuses.items() if st not in STATUSES
    ]
    return SampleSection(
        rows=rows,
        shown=len(rows),
        total=len(run.samples),
        prefixes=list(prefixes.values()),
        shared=list(pool.shared.values()),
        limit=limit,
        tasks=list(by_task),
        statuses=ordered_status,
        verdicts=[(v, verdicts[v]) for v in ("correct", "wrong", "unscored") if verdicts[v]],
    )


# ----------------------------------------------------------------------------------------------------------
# Single-run report


@dataclass
class CountChip:
    status: str
    count: int


@dataclass
class LengthRow:
    label: str
    n: int
    accuracy: str
    truncated: int


@dataclass
class TaskView:
    name: str
    anchor: str
    version: str | None
    metrics: list[MetricView]
    counts: list[CountChip]
    total: int | None
    cards: list[SpeedCard]
    speed_rows: list[PctRow]
    speed_extra: list[KV]
    server_available: bool | None
    server_rows: list[ServerRow]
    server_absent: list[str]
    gpu_rows: list[GpuRow]
    gpu_extra: list[KV]
    detail: DetailView
    length_rows: list[LengthRow]
    length_unknown: int
    has_summary: bool


def task_view(run: RunData, name: str, index: int) -> TaskView:
    t = run.summary_tasks.get(name, {})
    counts = as_dict(t.get("counts"))
    chips = [CountChip(st, as_int(counts.get(st)) or 0) for st in STATUSES if as_int(counts.get(st))]
    chips += [
        CountChip(str(k), as_int(v) or 0) for k, v in counts.items() if k not in STATUSES and k != "total" and as_int(v)
    ]
    speed = as_dict(t.get("speed"))
    server = as_dict(t.get("server"))
    srows, sextra = speed_table(speed)
    grows, gextra = gpu_rows(as_dict(t.get("gpu")), as_dict(run.manifest.get("server")).get("gpus"))
    la = accuracy_by_length(s for s in run.samples if s.get("task") == name)
    length_rows = [LengthRow(b.label, b.n, fmt_pct(b.accuracy), b.truncated) for b in la.buckets if b.n]
    available = server.get("available")
    return TaskView(
        name=name,
        anchor=f"task-{index}",
        version=as_str(t.get("version") or run.manifest_tasks.get(name, {}).get("version")),
        metrics=metric_views(t),
        counts=chips,
        total=as_int(counts.get("total")),
        cards=speed_cards(speed),
        speed_rows=srows,
        speed_extra=sextra,
        server_available=available if isinstance(available, bool) else None,
        server_rows=server_rows(server, speed) if server and available is not False else [],
        server_absent=[str(x) for x in as_list(server.get("absent"))],
        gpu_rows=grows if as_dict(t.get("gpu")) else [],
        gpu_extra=gextra,
        detail=detail_view(t.get("detail")),
        length_rows=length_rows,
        length_unknown=la.unknown_length,
        has_summary=bool(t),
    )


def _chart_series_cdf(run: RunData, tasks: list[str], key: str) -> list[dict[str, Any]]:
    series = []
    for task in tasks:
        vals = sample_values((s for s in run.samples if s.get("task") == task and s.get("status") != "api_error"), key)
        if vals:
            series.append({"label": task, "points": cdf_points(vals)})
    return series


def run_charts(run: RunData, tasks: list[str]) -> list[dict[str, Any]]:
    charts: list[dict[str, Any]] = []
    for key, title in (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2e_ms", "E2E latency (ms)")):
        series = _chart_series_cdf(run, tasks, key)
        if series:
            charts.append({"id": f"cdf-{key}", "kind": "cdf", "title": f"CDF of {title}", "x": title, "series": series})
    labels = length_bucket_labels()
    datasets = []
    used: set[int] = set()
    for task in tasks:
        la = accuracy_by_length(s for s in run.samples if s.get("task") == task)
        if not any(b.n for b in la.buckets):
            continue
        values = [round(100 * b.accuracy, 2) if b.accuracy is not None else None for b in la.buckets]
        used |= {i for i, b in enumerate(la.buckets) if b.n}
        datasets.append({"label": task, "values": values, "n": [b.n for b in la.buckets]})
    if datasets:
        keep = sorted(used)
        for d in datasets:
            d["values"] = [d["values"][i] for i in keep]
            d["n"] = [d["n"][i] for i in keep]
        charts.append(
            {
                "id": "acc-length",
                "kind": "bar",
                "title": "Accuracy by output length",
                "x": "output tokens",
                "y": "accuracy (%)",
                "labels": [labels[i] for i in keep],
                "series": datasets,
            }
        )
    return charts


@dataclass
class RunView:
    title: str
    model: str | None
    label: str
    generated_at: str
    banners: list[Banner]
    provenance: list[KV]
    task_provenance: list[TaskProvenance]
    tasks: list[TaskView]
    samples: SampleSection
    charts: list[dict[str, Any]]
    chart_ids: set[str]


def build_run_view(run: RunData) -> RunView:
    names = run.task_names()
    model = as_str(run.manifest.get("model"))
    prov, tprov = provenance(run)
    charts = run_charts(run, names)
    return RunView(
        title=f"{model or run.label} · evalkit report",
        model=model,
        label=run.label,
        generated_at=now_iso(),
        banners=run_banners(run),
        provenance=prov,
        task_provenance=tprov,
        tasks=[task_view(run, n, i) for i, n in enumerate(names)],
        samples=sample_section(run),
        charts=charts,
        chart_ids={c["id"] for c in charts},
    )


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


# ----------------------------------------------------------------------------------------------------------
# Comparison report


def run_config(run: RunData) -> dict[str, str]:
    """A flat {setting: value} of what shapes a run's numbers: server flags, env, sampling, versions."""
    m = run.manifest
    cfg: dict[str, str] = {}

    def put(k: str, v: Any) -> None:
        if v is not None:
            cfg[k] = compact_json(v)

    put("model", m.get("model"))
    endpoint = as_dict(m.get("endpoint"))
    put(
        "endpoint",
        " ".join(x for x in (as_str(endpoint.get("kind")), endpoint_host(endpoint.get("base_url"))) if x) or None,
    )
    put("concurrency", m.get("concurrency"))
    server = as_dict(m.get("server"))
    put("vllm", server.get("vllm_version") or as_dict(m.get("versions")).get("vllm"))
    put("gpu", gpu_summary(server.get("gpus")))
    pos, flags = parse_argv(server.get("argv"))
    if pos:
        put("server args", " ".join(pos))
    for k, v in flags.items():
        put(k, v)
    for k, v in as_dict(server.get("env_overrides")).items():
        put(f"env {k}", v)
    for task, t in run.manifest_tasks.items():
        for k, v in as_dict(t.get("settings")).items():
            put(f"{task}.{k}", "null" if v is None else v)
    put("evalkit", m.get("evalkit_version"))
    return cfg


@dataclass
class CompareRunHead:
    index: int
    letter: str
    label: str
    model: str | None
    diff: list[KV]
    argv: str | None
    notes: list[str]


@dataclass
class CompareCell:
    metric: MetricView | None
    delta: str = ""


@dataclass
class CompareRow:
    index: int
    letter: str
    label: str
    present: bool
    diff: list[KV]
    tok_s: str
    req_s: str
    ttft: str
    tpot: str
    tok_s_delta: str
    req_s_delta: str
    ttft_delta: str
    tpot_delta: str
    cells: list[CompareCell]
    on_front: bool
    counts: str


@dataclass
class CompareTask:
    name: str
    anchor: str
    metric_labels: list[str]
    primary: str | None
    primary_label: str
    rows: list[CompareRow]
    front: list[str]  # labels on the Pareto front


@dataclass
class FlipRow:
    task: str
    doc_id: str
    sample_index: int
    metric: str | None
    target: str | None
    extracted_a: str | None
    extracted_b: str | None
    status_a: str
    status_b: str
    prompt: TextRef
    response_a: TextRef
    response_b: TextRef
    reasoning_a: TextRef
    reasoning_b: TextRef


@dataclass
class ProblemChangeRow:
    task: str
    doc_id: str
    acc_a: str
    acc_b: str
    delta: str
    n_a: int
    n_b: int
    worse: bool


@dataclass
class FlipsView:
    a: CompareRunHead
    b: CompareRunHead
    both_correct: int
    both_wrong: int
    unscored: int
    only_a: int
    only_b: int
    n_broken: int
    n_fixed: int
    broken: list[FlipRow]
    fixed: list[FlipRow]
    problems: list[ProblemChangeRow]
    limit: int
    net_by_task: list[KV]
    prefixes: list[SharedText]


@dataclass
class CompareView:
    title: str
    generated_at: str
    runs: list[CompareRunHead]
    common: list[KV]
    banners: list[Banner]
    tasks: list[CompareTask]
    flips: FlipsView | None
    charts: list[dict[str, Any]]
    chart_ids: set[str]


def letter(i: int) -> str:
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(65 + r) + s
    return s


def unique_labels(runs: list[RunData]) -> list[str]:
    labels = [r.label for r in runs]
    counts = Counter(labels)
    out = []
    for r in runs:
        lab = r.label
        if counts[lab] > 1:
            lab = f"{r.path.resolve().parent.name}/{lab}"
        out.append(lab)
    seen: Counter[str] = Counter()
    final = []
    for lab in out:
        seen[lab] += 1
        final.append(lab if seen[lab] == 1 and out.count(lab) == 1 else f"{lab} ({seen[lab]})")
    return final


def _rel_delta(v: Any, base: Any) -> str:
    x, b = as_num(v), as_num(base)
    if x is None or b is None or b == 0:
        return ""
    return f"{100 * (x - b) / abs(b):+.1f}%"


def _acc_delta(m: MetricView | None, base: MetricView | None) -> str:
    if m is None or base is None or m.value is None or base.value is None:
        return ""
    if m.is_fraction and base.is_fraction:
        return f"{100 * (m.value - base.value):+.1f} pp"
    return f"{m.value - base.value:+.4g}"


def _counts_str(counts: dict[str, Any]) -> str:
    parts = [f"{st} {as_int(counts.get(st))}" for st in ("api_error", "truncated") if as_int(counts.get(st))]
    return ", ".join(parts)


def compare_banners(runs: list[RunData], labels: list[str]) -> list[Banner]:
    out: list[Banner] = []
    for run, lab in zip(runs, labels, strict=True):
        for note in run.notes:
            out.append(Banner("warn", f"{lab}: {note}"))
        for name, t in run.summary_tasks.items():
            speed = as_dict(t.get("speed"))
            if speed.get("client_bound") is True:
                out.append(Banner("warn", f"{lab} / {name}: client-bound; its speed numbers are lower bounds."))
    tasks: dict[str, list[tuple[str, str, str]]] = {}
    for run, lab in zip(runs, labels, strict=True):
        for name, t in run.manifest_tasks.items():
            sha = compact_json(t.get("data_sha256")) if t.get("data_sha256") else ""
            tasks.setdefault(name, []).append((lab, as_str(t.get("version")) or "", sha))
    for name, entries in tasks.items():
        if len({e[1] for e in entries}) > 1:
            out.append(
                Banner(
                    "warn",
                    f"{name}: runs used different task versions ("
                    + ", ".join(f"{e[0]}: {e[1] or '?'}" for e in entries)
                    + ").",
                )
            )
        if len({e[2] for e in entries if e[2]}) > 1:
            out.append(
                Banner(
                    "warn",
                    f"{name}: runs used different data (data_sha256 differs); accuracy is not comparable.",
                )
            )
    return out


def build_compare_view(runs: list[RunData], pair: tuple[int, int] | None) -> CompareView:
    labels = unique_labels(runs)
    configs = [run_config(r) for r in runs]
    keys: list[str] = []
    for c in configs:
        for k in c:
            if k not in keys:
                keys.append(k)
    differing = [k for k in keys if len({c.get(k) for c in configs}) > 1]
    common = [KV(k, configs[0][k], mono=True) for k in keys if k not in differing]
    heads = []
    for i, (run, lab, cfg) in enumerate(zip(runs, labels, configs, strict=True)):
        heads.append(
            CompareRunHead(
                index=i,
                letter=letter(i),
                label=lab,
                model=as_str(run.manifest.get("model")),
                diff=[KV(k, cfg.get(k, DASH), mono=True) for k in differing],
                argv=argv_str(as_dict(run.manifest.get("server")).get("argv")),
                notes=run.notes,
            )
        )
    task_names: list[str] = []
    for r in runs:
        for n in r.task_names():
            if n not in task_names and (n in r.summary_tasks):
                task_names.append(n)
    tasks: list[CompareTask] = []
    charts: list[dict[str, Any]] = []
    for ti, name in enumerate(task_names):
        metric_names: list[str] = []
        for r in runs:
            for k in as_dict(r.summary_tasks.get(name, {}).get("metrics")):
                if str(k) not in metric_names:
                    metric_names.append(str(k))
        primary = metric_names[0] if metric_names else None
        base_t = runs[0].summary_tasks.get(name, {})
        base_speed = as_dict(base_t.get("speed"))
        base_metrics = {mv.name: mv for mv in metric_views(base_t)}
        points: list[tuple[float | None, float | None]] = []
        rows: list[CompareRow] = []
        for i, (run, lab) in enumerate(zip(runs, labels, strict=True)):
            t = run.summary_tasks.get(name)
            speed = as_dict((t or {}).get("speed"))
            mvs = {mv.name: mv for mv in metric_views(t or {})}
            pm = mvs.get(primary) if primary else None
            points.append((as_num(speed.get("output_tokens_per_s")), pm.value if pm else None))
            # only the config keys of this task (or global) that differ
            diff = [kv for kv in heads[i].diff if "." not in kv.key or kv.key.startswith(f"{name}.")]
            ttft = as_dict(speed.get("ttft_ms")).get("p50")
            tpot = as_dict(speed.get("tpot_ms")).get("p50")
            rows.append(
                CompareRow(
                    index=i,
                    letter=letter(i),
                    label=lab,
                    present=t is not None,
                    diff=diff,
                    tok_s=fmt_num(speed.get("output_tokens_per_s")),
                    req_s=fmt_num(speed.get("requests_per_s"), 2),
                    ttft=fmt_ms(ttft),
                    tpot=fmt_ms(tpot),
                    tok_s_delta=_rel_delta(speed.get("output_tokens_per_s"), base_speed.get("output_tokens_per_s"))
                    if i
                    else "",
                    req_s_delta=_rel_delta(speed.get("requests_per_s"), base_speed.get("requests_per_s")) if i else "",
                    ttft_delta=_rel_delta(ttft, as_dict(base_speed.get("ttft_ms")).get("p50")) if i else "",
                    tpot_delta=_rel_delta(tpot, as_dict(base_speed.get("tpot_ms")).get("p50")) if i else "",
                    cells=[
                        CompareCell(mvs.get(k), _acc_delta(mvs.get(k), base_metrics.get(k)) if i else "")
                        for k in metric_names
                    ],
                    on_front=False,
                    counts=_counts_str(as_dict((t or {}).get("counts"))),
                )
            )
        front = pareto_front(points)
        for i in front:
            rows[i].on_front = True
        anchor = f"cmp-{ti}"
        tasks.append(
            CompareTask(
                name=name,
                anchor=anchor,
                metric_labels=[metric_label(k) for k in metric_names],
                primary=primary,
                primary_label=metric_label(primary) if primary else DASH,
                rows=rows,
                front=[labels[i] for i in front],
            )
        )
        pts = []
        for i, ((x, y), row) in enumerate(zip(points, rows, strict=True)):
            if x is None or y is None:
                continue
            mv = row.cells[0].metric if row.cells else None
            frac = mv.is_fraction if mv else True
            scale = 100.0 if frac else 1.0
            pts.append(
                {
                    "label": f"{letter(i)} {labels[i]}",
                    "x": round(x, 3),
                    "y": round(y * scale, 4),
                    "lo": round(mv.lo * scale, 4) if mv and mv.lo is not None else None,
                    "hi": round(mv.hi * scale, 4) if mv and mv.hi is not None else None,
                    "front": i in front,
                }
            )
        if pts:
            frac0 = all(r.cells[0].metric.is_fraction for r in rows if r.cells and r.cells[0].metric)
            charts.append(
                {
                    "id": f"scatter-{ti}",
                    "kind": "scatter",
                    "title": f"{name}: {metric_label(primary or '')} vs output throughput",
                    "x": "output tokens/s",
                    "y": f"{metric_label(primary or '')}{' (%)' if frac0 else ''}",
                    "points": pts,
                    "front": [
                        {
                            "x": round(points[i][0] or 0.0, 3),
                            "y": round((points[i][1] or 0.0) * (100 if frac0 else 1), 4),
                        }
                        for i in front
                    ],
                }
            )
    flips = None
    if len(runs) >= 2:
        a, b = pair if pair is not None else (0, 1)
        flips = flips_view(runs[a], runs[b], heads[a], heads[b])
    return CompareView(
        title="evalkit comparison · " + " vs ".join(labels[:4]) + (" …" if len(labels) > 4 else ""),
        generated_at=now_iso(),
        runs=heads,
        common=common,
        banners=compare_banners(runs, labels),
        tasks=tasks,
        flips=flips,
        charts=charts,
        chart_ids={c["id"] for c in charts},
    )


def _prompt_prefixes(samples: list[dict[str, Any]], anchor: str) -> dict[str, SharedText]:
    by_task: dict[str, list[str]] = {}
    for s in samples:
        p = as_str(s.get("prompt"))
        if p is not None:
            by_task.setdefault(str(s.get("task")), []).append(p)
    out: dict[str, SharedText] = {}
    for ti, (task, prompts) in enumerate(by_task.items()):
        pre = shared_prefix(prompts, SHARED_MIN_CHARS)
        if pre:
            out[task] = SharedText(
                f"{anchor}-p{ti}", f"Shared prompt prefix of {task}", len(pre), cut_text(pre, TEXT_LIMIT * 4)
            )
            out[task].text = pre
    return out


def flips_view(ra: RunData, rb: RunData, ha: CompareRunHead, hb: CompareRunHead) -> FlipsView:
    f = compute_flips(ra.samples, rb.samples)
    pool = TextPool("flip")
    prefixes = _prompt_prefixes(ra.samples, "flip")

    def prompt_ref(s: dict[str, Any]) -> TextRef:
        prompt = as_str(s.get("prompt"))
        pre = prefixes.get(str(s.get("task")))
        if prompt is not None and pre is not None and prompt.startswith(pre.text):
            return TextRef(
                cut=cut_text(prompt[pre.chars :], 1500, 0.8), prefix_anchor=pre.anchor, prefix_chars=pre.chars
            )
        return TextRef(cut=cut_text(prompt, 1500, 0.8))

    def row(fl: Flip) -> FlipRow:
        a, b = fl.a, fl.b
        metric = fl.metric
        ea = as_dict(a.get("extracted"))
        eb = as_dict(b.get("extracted"))
        return FlipRow(
            task=fl.key[0],
            doc_id=str(fl.key[1]),
            sample_index=fl.key[2],
            metric=metric,
            target=short(a.get("target") if a.get("target") is not None else b.get("target")),
            extracted_a=short(ea.get(metric)) if metric else None,
            extracted_b=short(eb.get(metric, next(iter(eb.values()), None) if eb else None)) if metric else None,
            status_a=as_str(a.get("status")) or "?",
            status_b=as_str(b.get("status")) or "?",
            prompt=prompt_ref(a),
            response_a=pool.ref(as_str(a.get("response")), dedupe=False),
            response_b=pool.ref(as_str(b.get("response")), dedupe=False),
            reasoning_a=pool.ref(as_str(a.get("reasoning")), dedupe=False),
            reasoning_b=pool.ref(as_str(b.get("reasoning")), dedupe=False),
        )

    broken = [row(x) for x in f.broken[:MAX_FLIPS]]
    fixed = [row(x) for x in f.fixed[:MAX_FLIPS]]
    limit = pool.finish(FLIP_TEXT_BYTES)
    net: Counter[str] = Counter()
    for x in f.broken:
        net[x.key[0]] -= 1
    for x in f.fixed:
        net[x.key[0]] += 1
    problems = [
        ProblemChangeRow(
            task=p.task,
            doc_id=str(p.doc_id),
            acc_a=fmt_pct(p.acc_a, 0),
            acc_b=fmt_pct(p.acc_b, 0),
            delta=f"{100 * p.delta:+.0f} pp",
            n_a=p.n_a,
            n_b=p.n_b,
            worse=p.delta < 0,
        )
        for p in f.problems
    ]
    return FlipsView(
        a=ha,
        b=hb,
        both_correct=f.both_correct,
        both_wrong=f.both_wrong,
        unscored=f.unscored,
        only_a=f.only_a,
        only_b=f.only_b,
        n_broken=len(f.broken),
        n_fixed=len(f.fixed),
        broken=broken,
        fixed=fixed,
        problems=problems,
        limit=limit,
        net_by_task=[KV(k, f"{v:+d}") for k, v in net.items()],
        prefixes=list(prefixes.values()),
    )


def is_finite(x: Any) -> bool:
    v = as_num(x)
    return v is not None and math.isfinite(v)
