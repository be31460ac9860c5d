"""Per-task tables of the single-run report: speed, server metrics, GPU memory and task detail."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from evalkit.report.common import DASH, KV, TEXT_LIMIT, fmt_int, fmt_ms, fmt_num, fmt_pct, fmt_sig, short
from evalkit.report.store import as_dict, as_list, as_num, as_str

SPEED_KEYS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E latency"))


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


def _flag_str(v: Any, yes: str, no: str, other: str) -> str:
    if v is True:
        return yes
    if v is False:
        return no
    return other


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
